use crate::args::InfoArgs;

pub fn run(_args: &InfoArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not yet implemented")
}
