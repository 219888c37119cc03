//! The axum router and its state.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use secrecy::SecretString;
use tokio::sync::Notify;

use crate::store::Store;

/// What every request handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// Group-committing writer for deliveries (see `intake.rs`).
    pub intake: super::Intake,
    pub webhook_secrets: Arc<Vec<SecretString>>,
    /// Woken after a delivery is stored, so the processor handles it at once.
    pub wake: Arc<Notify>,
    /// Woken when a remote result finished a job (its reports are queued).
    pub wake_outbox: Arc<Notify>,
    /// Woken when a remote result asks for a re-dispatch.
    pub wake_remote: Arc<Notify>,
    pub metrics: PrometheusHandle,
    /// Grade pages, the dashboard and the operator credential (`pages.rs`).
    pub pages: Arc<super::Pages>,
}

pub fn create_app(state: AppState, body_limit: usize) -> Router {
    Router::new()
        .route("/webhook", post(super::webhook::receive))
        .route("/jobs/{id}/result", post(super::results::post_result))
        .route("/grades/{id}", get(super::pages::grade_page))
        .route("/grades/{id}/{file}", get(super::pages::download))
        .route("/dashboard", get(super::pages::dashboard))
        .route(
            "/login",
            get(super::pages::login_form).post(super::pages::login),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route(
            "/metrics",
            get(|State(s): State<AppState>| async move { s.metrics.render() }),
        )
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// Ready when the store answers.
async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "store unavailable"),
    }
}
