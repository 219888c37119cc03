//! `infradev serve`: the GitHub App until Ctrl-C.

use std::path::Path;

use crate::cli::CliError;
use crate::exit;

pub async fn serve(path: &Path) -> Result<u8, CliError> {
    let config = crate::config::ServerConfig::load(path).map_err(CliError::task)?;
    let secrets = config.secrets().map_err(CliError::task)?;
    let service = crate::app::service::Service::start(config, secrets, Default::default())
        .await
        .map_err(|error| CliError {
            code: exit::INFRA,
            error,
        })?;
    eprintln!("infradev: listening on http://{}", service.addr());
    tokio::select! {
        _ = service.wait() => Err(CliError { code: exit::INFRA, error: anyhow::anyhow!("a service loop stopped") }),
        _ = tokio::signal::ctrl_c() => Ok(exit::RESOLVED),
    }
}
