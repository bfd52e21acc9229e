pub fn run(_a: Args) -> anyhow::Result<()> {
    anyhow::bail!("compare: not written yet")
}
#[derive(clap::Args)]
pub struct Args {}
