//! Exit codes, the same for `tapdeck` and `tapdeck-analyze`: 0 ok, 1 failure, 2 usage
//! error (the command line cannot be run as written: clap's own checks, and flags that
//! do not go together, which the commands check with [`usage`]).

/// The line each `--help` ends with.
pub const EXIT_CODES_HELP: &str = "Exit status: 0 ok, 1 failure, 2 usage error (an unknown, \
missing or misplaced flag, flags that do not go together: the command line cannot be run as \
written).";

pub const FAILURE: i32 = 1;
pub const USAGE: i32 = 2;

/// A command line that cannot be run as written: exits 2, like clap's own checks.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A usage error, ready for `return Err(usage(..))` or `?`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// The exit code of an error: 2 when it is (or was caused by) a usage error, else 1.
pub fn code_of(e: &anyhow::Error) -> i32 {
    if e.chain().any(|c| c.is::<UsageError>()) {
        USAGE
    } else {
        FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn usage_errors_exit_2_even_with_context_and_others_1() {
        assert_eq!(code_of(&usage("add -i IF")), USAGE);
        let wrapped = Err::<(), _>(usage("add -i IF"))
            .context("record")
            .unwrap_err();
        assert_eq!(code_of(&wrapped), USAGE);
        assert_eq!(code_of(&anyhow::anyhow!("no such file")), FAILURE);
    }
}
