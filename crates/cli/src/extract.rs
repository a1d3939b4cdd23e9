use crate::args::ExtractArgs;

pub fn run(_args: &ExtractArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not yet implemented")
}
