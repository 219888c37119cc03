//! The grade pages, their downloads, the dashboard and the operator login:
//!
//! | route | who |
//! |---|---|
//! | `GET /grades/{id}` | anyone: what the check run shows; an operator: the full report |
//! | `GET /grades/{id}/report.json`, `/junit.xml` | operator |
//! | `GET /dashboard` | operator |
//! | `GET /login`, `POST /login` | the form that sets the operator cookie |
//!
//! An operator is a request with `Authorization: Bearer <operator token>` or the cookie the
//! login form sets: `infradev_operator=<hex HMAC-SHA256(token, "infradev operator session")>`
//! (so the cookie is not the token, and rotating the token ends every session). Comparisons
//! are constant time. Every page is sent with a Content-Security-Policy that allows no
//! script and no resource from anywhere, and operator responses are never cached.

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::state::{AppState, COOKIE};
use crate::grade::report::{render_json, render_junit};
use crate::service::app::grades;
use crate::service::web::{render_dashboard, render_grade_page, render_login};

const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

fn html(status: StatusCode, body: String, private: bool) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure(h, private);
    response
}

fn secure(h: &mut HeaderMap, private: bool) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if private {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

fn unauthorized(next: &str) -> Response {
    let mut response = html(StatusCode::UNAUTHORIZED, render_login(next, false), true);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"infradev\""),
    );
    response
}

fn not_found() -> Response {
    html(StatusCode::NOT_FOUND, "no such grade\n".to_owned(), false)
}

fn store_error(e: anyhow::Error) -> Response {
    tracing::error!(error = %format!("{e:#}"), "a page could not read the store");
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        "the store is unavailable\n".to_owned(),
        true,
    )
}

pub async fn grade_page(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> Response {
    let operator = state.pages.is_operator(&headers);
    match grades::grade_page(&state.store, id, &state.pages.web_url, &state.pages.root).await {
        Ok(Some(page)) => html(StatusCode::OK, render_grade_page(&page, operator), operator),
        Ok(None) => not_found(),
        Err(e) => store_error(e),
    }
}

/// `report.json` or `junit.xml` of a graded job (operators).
pub async fn download(
    State(state): State<AppState>,
    Path((id, file)): Path<(i64, String)>,
    headers: HeaderMap,
) -> Response {
    if !state.pages.is_operator(&headers) {
        return unauthorized(&format!("/grades/{id}"));
    }
    let job = match state
        .store
        .graded_job(crate::service::store::JobId(id))
        .await
    {
        Ok(Some(job)) => job,
        Ok(None) => return not_found(),
        Err(e) => return store_error(e.into()),
    };
    let Some(report) = grades::report_of(&job) else {
        return not_found();
    };
    let (body, kind) = match file.as_str() {
        "report.json" => (render_json(&report), "application/json"),
        "junit.xml" => (render_junit(&report), "application/xml"),
        _ => return not_found(),
    };
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"infradev-{id}-{file}\""))
    {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    secure(h, true);
    response
}

pub async fn dashboard(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !state.pages.is_operator(&headers) {
        return unauthorized("/dashboard");
    }
    match grades::dashboard(&state.store).await {
        Ok(d) => html(StatusCode::OK, render_dashboard(&d), true),
        Err(e) => store_error(e),
    }
}

#[derive(Debug, Deserialize)]
pub struct Next {
    #[serde(default)]
    next: Option<String>,
}

/// Where to go after logging in: a path of ours, never another site.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains(['\\', '\r', '\n'])
                && n.len() < 200 =>
        {
            n.to_owned()
        }
        _ => "/dashboard".to_owned(),
    }
}

pub async fn login_form(Query(q): Query<Next>) -> Response {
    html(
        StatusCode::OK,
        render_login(&safe_next(q.next.as_deref()), false),
        true,
    )
}

#[derive(Debug, Deserialize)]
pub struct Login {
    token: String,
    #[serde(default)]
    next: Option<String>,
}

pub async fn login(State(state): State<AppState>, Form(form): Form<Login>) -> Response {
    let next = safe_next(form.next.as_deref());
    let pages = &state.pages;
    let (true, Some(session)) = (
        pages.token_matches(form.token.trim()),
        pages.session_value(),
    ) else {
        tracing::warn!("an operator login failed");
        return html(StatusCode::UNAUTHORIZED, render_login(&next, true), true);
    };
    let cookie = format!(
        "{COOKIE}={session}; Path=/; HttpOnly; SameSite=Lax; Max-Age=2592000{}",
        if pages.secure_cookie { "; Secure" } else { "" }
    );
    let mut response = StatusCode::SEE_OTHER.into_response();
    let h = response.headers_mut();
    if let (Ok(c), Ok(l)) = (HeaderValue::from_str(&cookie), HeaderValue::from_str(&next)) {
        h.insert(header::SET_COOKIE, c);
        h.insert(header::LOCATION, l);
    }
    secure(h, true);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_only_redirects_to_our_own_paths() {
        for (next, want) in [
            (Some("/grades/3"), "/grades/3"),
            (Some("//evil.example/x"), "/dashboard"),
            (Some("https://evil.example/"), "/dashboard"),
            (Some("/\\evil.example"), "/dashboard"),
            (None, "/dashboard"),
        ] {
            assert_eq!(safe_next(next), want);
        }
    }
}
