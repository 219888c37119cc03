//! `infradev`: see `infradev --help` and README.md.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = infradev::cli::Cli::parse();
    infradev::cli::logging::init(cli.log_format, cli.default_log_level());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(infradev::cli::exit::INFRA);
        }
    };
    std::process::ExitCode::from(runtime.block_on(infradev::cli::run(cli)))
}
