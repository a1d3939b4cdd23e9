use crate::args::RecordArgs;

pub fn run(_args: &RecordArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not yet implemented")
}
