use crate::args::VerifyArgs;

pub fn run(_args: &VerifyArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not yet implemented")
}
