//! The axum router: routes, the drain switch, health and readiness.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::state::AppState;

/// Set once the server is stopping: from then on the webhook intake refuses new deliveries.
#[derive(Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    pub fn start(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Seconds a refused delivery's sender is asked to wait (GitHub redelivers failed deliveries
/// when asked, and a restarted server's reconcile asks).
const RETRY_AFTER_S: &str = "30";

pub fn create_app(state: AppState, body_limit: usize, draining: Draining) -> Router {
    Router::new()
        .route(
            "/webhook",
            post(super::webhook::receive).layer(middleware::from_fn_with_state(
                draining,
                refuse_while_draining,
            )),
        )
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

/// A stopping server stores nothing new: 503 with `Retry-After`, so the delivery is not
/// acknowledged and GitHub (or reconcile after the restart) delivers it again.
async fn refuse_while_draining(
    State(draining): State<Draining>,
    request: Request,
    next: Next,
) -> Response {
    if draining.0.load(Ordering::SeqCst) {
        metrics::counter!("infradev_webhooks_total", "outcome" => "draining").increment(1);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, RETRY_AFTER_S)],
            "the server is stopping; deliver this again later",
        )
            .into_response();
    }
    next.run(request).await
}
