//! `POST /jobs/{id}/result`: where remote runs hand their grade back (see `app::results`).
//! 200 with `{"status": "accepted"|"retried"|"ignored"|"duplicate", "reason": …}` for a valid
//! token, whatever became of the result; 401 for a missing, wrong or expired token; 400 for a
//! body that is not this job's result; 503 when the store fails (the run retries).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::state::AppState;
use crate::service::app::results::{Answer, ResultError, receive};

pub async fn post_result(
    State(state): State<AppState>,
    Path(job_id): Path<i64>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match receive(&state.store, job_id, bearer, &body).await {
        Ok(answer) => {
            tracing::info!(job = job_id, status = answer.status(), reason = ?answer.reason(), "remote result");
            match &answer {
                Answer::Accepted => state.wake_outbox.notify_one(),
                Answer::Retried(_) => state.wake_remote.notify_waiters(),
                _ => {}
            }
            (
                StatusCode::OK,
                axum::Json(json!({"status": answer.status(), "reason": answer.reason()})),
            )
                .into_response()
        }
        Err(e) => {
            let status = match &e {
                ResultError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
                ResultError::BadBody(_) => StatusCode::BAD_REQUEST,
                ResultError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            tracing::warn!(job = job_id, %status, error = %e, "remote result refused");
            (status, axum::Json(json!({"error": e.to_string()}))).into_response()
        }
    }
}
