//! `steward-bench <workload> [--endpoints ..] [--clients N] [--conns M] [--duration 10s | --total N]
//! [--value-size 256] [-o table|json]`: parses, runs, prints; one line on stderr and exit 1 on
//! error.

use clap::Parser;
use steward_bench::args::{self, Cli, Output};
use steward_bench::runner;

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let code = match run(&cli).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

async fn run(cli: &Cli) -> anyhow::Result<()> {
    let plan = args::plan(cli).map_err(anyhow::Error::msg)?;
    let report = runner::run(&plan).await?;
    match plan.output {
        Output::Table => print!("{}", report.to_table()),
        Output::Json => println!("{}", report.to_json()),
    }
    Ok(())
}
