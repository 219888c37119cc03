//! `POST /webhook`: verify the signature over the raw body, check it is an event we can read,
//! store it durably, and only then answer 202. A redelivery of a stored delivery is a no-op.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

use super::state::AppState;
use crate::service::store::{
    Inserted, NewDelivery, RefusalSource, RefusedDelivery, Store, StoreError,
};
use crate::service::webhook::{parse, verify_signature};

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
            let reason = format!("cannot read the {event} payload: {e}");
            // Signed by GitHub, so worth remembering: reconcile must not ask for it again.
            let refused = RefusedDelivery {
                delivery_id: delivery.to_owned(),
                event: Some(event.to_owned()),
                status: StatusCode::BAD_REQUEST.as_u16(),
                reason: reason.clone(),
                source: RefusalSource::Intake,
                refused_at: chrono::Utc::now(),
            };
            if let Err(e) = note_refused(&state.store, &refused).await {
                tracing::error!(error = %e, delivery, "cannot record a refused delivery");
            }
            return (StatusCode::BAD_REQUEST, reason, "bad_request");
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

/// Records a delivery answered with a 4xx (so that reconcile never asks for it again) and tells
/// the operator: a warning in the log and `infradev_deliveries_refused_total{source}` when it is
/// news. The table `refused_deliveries` keeps every one (docs/github-app.md).
pub async fn note_refused(store: &Store, refused: &RefusedDelivery) -> Result<(), StoreError> {
    if store.record_refused_delivery(refused).await? {
        tracing::warn!(
            delivery = %refused.delivery_id,
            event = ?refused.event,
            status = refused.status,
            reason = %refused.reason,
            source = refused.source.as_str(),
            "a webhook delivery was refused; it will not be redelivered"
        );
        metrics::counter!("infradev_deliveries_refused_total", "source" => refused.source.as_str())
            .increment(1);
    }
    Ok(())
}
