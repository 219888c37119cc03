//! `POST /webhook`: verify the signature over the raw body, check it is an event we can read,
//! store it durably, and only then answer 202. A redelivery of a stored delivery is a no-op.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

use super::router::AppState;
use crate::store::{Inserted, NewDelivery};
use crate::webhook::{parse, verify_signature};

pub(super) async fn receive(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let started = std::time::Instant::now();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (status, message, outcome) = intake(
        &state,
        header("x-hub-signature-256"),
        header("x-github-event"),
        header("x-github-delivery"),
        &body,
    )
    .await;
    metrics::counter!("infradev_webhooks_total", "outcome" => outcome).increment(1);
    metrics::histogram!("infradev_webhook_seconds").record(started.elapsed().as_secs_f64());
    (status, message)
}

async fn intake(
    state: &AppState,
    signature: Option<&str>,
    event: Option<&str>,
    delivery: Option<&str>,
    body: &[u8],
) -> (StatusCode, String, &'static str) {
    if !verify_signature(&state.webhook_secrets, signature, body) {
        return (
            StatusCode::UNAUTHORIZED,
            "bad or missing X-Hub-Signature-256".into(),
            "unauthorized",
        );
    }
    let (Some(event), Some(delivery)) = (event, delivery) else {
        return (
            StatusCode::BAD_REQUEST,
            "missing X-GitHub-Event or X-GitHub-Delivery".into(),
            "bad_request",
        );
    };
    let parsed = match parse(event, body) {
        Ok(parsed) => parsed,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("cannot read the {event} payload: {e}"),
                "bad_request",
            );
        }
    };
    let new = NewDelivery {
        delivery_id: delivery.to_owned(),
        event: event.to_owned(),
        action: parsed.action().map(str::to_owned),
        payload: body.to_vec(),
    };
    match state.intake.insert(new).await {
        Ok(Inserted::New) => {
            state.wake.notify_one();
            (StatusCode::ACCEPTED, "stored".into(), "stored")
        }
        Ok(Inserted::Duplicate) => (StatusCode::ACCEPTED, "already stored".into(), "duplicate"),
        Err(e) => {
            tracing::error!(error = %e, delivery, "cannot store a delivery");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot store the delivery; redeliver it".into(),
                "store_error",
            )
        }
    }
}
