//! Prometheus metrics (`GET /metrics`).

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Installs the global recorder once per process and returns a handle that renders it.
pub fn install_metrics() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // A second install in the same process (tests) keeps the first recorder.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
