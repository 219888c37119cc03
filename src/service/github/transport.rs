//! One octocrab client for every call. octocrab gives us the HTTP stack (hyper, rustls, base URI,
//! timeouts, tracing); we give each request its own `Authorization` (the App JWT or an
//! installation token), so one client serves the App and every installation. octocrab is built
//! without its `retry` feature: it never retries; `error.rs` classifies and callers retry.

use std::time::Duration;

use chrono::Utc;
use http::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use octocrab::Octocrab;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;

use super::error::GitHubError;

/// The REST API version we speak, on every request.
pub const API_VERSION: &str = "2022-11-28";
const API_VERSION_HEADER: &str = "x-github-api-version";
const MEDIA_TYPE: &str = "application/vnd.github+json";

/// A status, headers and body that GitHub sent back.
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

#[derive(Clone)]
pub(crate) struct Transport {
    crab: Octocrab,
}

impl Transport {
    pub fn new(api_url: &str) -> anyhow::Result<Self> {
        let crab = Octocrab::builder()
            .base_uri(api_url)
            .map_err(|e| anyhow::anyhow!("GitHub API URL {api_url:?}: {e}"))?
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(Duration::from_secs(60)))
            .set_write_timeout(Some(Duration::from_secs(60)))
            .build()
            .map_err(|e| anyhow::anyhow!("building the GitHub client: {}", chain(&e)))?;
        Ok(Transport { crab })
    }

    /// Send one request and read the whole answer, whatever its status.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        bearer: &SecretString,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, GitHubError> {
        let path = strip_query(path_and_query);
        let transport_err = |message: String| GitHubError::Transport {
            method: method.to_string(),
            path: path.to_string(),
            message,
        };
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", bearer.expose_secret()))
            .map_err(|_| GitHubError::Auth("the credential is not a valid header value".into()))?;
        auth.set_sensitive(true);
        let builder = http::Request::builder()
            .method(method.clone())
            .uri(path_and_query)
            .header(AUTHORIZATION, auth)
            .header(ACCEPT, MEDIA_TYPE);
        let mut request = self
            .crab
            .build_request(builder, body)
            .map_err(|e| GitHubError::InvalidInput(format!("{method} {path}: {}", chain(&e))))?;
        // octocrab adds its own pin of the version; ours is the contract, and exactly one.
        request
            .headers_mut()
            .insert(API_VERSION_HEADER, HeaderValue::from_static(API_VERSION));
        let response = self
            .crab
            .execute(request)
            .await
            .map_err(|e| transport_err(chain(&e)))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = self
            .crab
            .body_to_string(response)
            .await
            .map_err(|e| transport_err(format!("reading the answer: {}", chain(&e))))?;
        tracing::debug!(%method, path, status = status.as_u16(), "GitHub call");
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// Send and insist on a 2xx; anything else becomes [`GitHubError::Api`].
    pub async fn send_ok(
        &self,
        method: Method,
        path_and_query: &str,
        bearer: &SecretString,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, GitHubError> {
        let reply = self
            .send(method.clone(), path_and_query, bearer, body)
            .await?;
        if reply.status.is_success() {
            Ok(reply)
        } else {
            Err(api_error(&method, path_and_query, &reply))
        }
    }
}

/// Decode a success body into `T`.
pub(crate) fn decode<T: DeserializeOwned>(
    method: &Method,
    path_and_query: &str,
    reply: &Reply,
) -> Result<T, GitHubError> {
    serde_json::from_str(&reply.body).map_err(|e| GitHubError::Decode {
        method: method.to_string(),
        path: strip_query(path_and_query).to_string(),
        message: e.to_string(),
    })
}

/// The error for a non-2xx answer, with what retry classification needs from the headers.
pub(crate) fn api_error(method: &Method, path_and_query: &str, reply: &Reply) -> GitHubError {
    let header = |name: &str| {
        reply
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let retry_after = header("retry-after").and_then(parse_retry_after);
    let ratelimit_remaining = header("x-ratelimit-remaining").and_then(|v| v.parse().ok());
    let ratelimit_reset_in = header("x-ratelimit-reset")
        .and_then(|v| v.parse::<i64>().ok())
        .map(|reset| Duration::from_secs((reset - Utc::now().timestamp()).max(0) as u64));
    GitHubError::Api {
        method: method.to_string(),
        path: strip_query(path_and_query).to_string(),
        status: reply.status.as_u16(),
        message: error_message(&reply.body),
        retry_after,
        ratelimit_remaining,
        ratelimit_reset_in,
    }
}

/// `retry-after` is seconds, or (rarely) an HTTP date.
fn parse_retry_after(value: &str) -> Option<Duration> {
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let secs = (at.timestamp() - Utc::now().timestamp()).max(0);
    Some(Duration::from_secs(secs as u64))
}

/// GitHub's `message` plus, for validation failures, its `errors`.
fn error_message(body: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return body.chars().take(300).collect();
    };
    let mut message = value
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or("")
        .to_string();
    if let Some(errors) = value.get("errors").filter(|e| !e.is_null()) {
        let errors = errors.to_string();
        message.push_str(" (errors: ");
        message.extend(errors.chars().take(500));
        message.push(')');
    }
    if message.is_empty() {
        message = body.chars().take(300).collect();
    }
    message
}

fn strip_query(path_and_query: &str) -> &str {
    path_and_query
        .split_once('?')
        .map_or(path_and_query, |(path, _)| path)
}

/// An error and its sources on one line.
fn chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Percent-encode one path segment or query value (everything but RFC 3986 unreserved).
pub(crate) fn enc(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The value of query parameter `name` in the `rel="next"` link of a `Link` header, if any.
pub(crate) fn next_link_param(headers: &HeaderMap, name: &str) -> Option<String> {
    let link = headers.get(http::header::LINK)?.to_str().ok()?;
    let next = link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim();
                p == r#"rel="next""# || p == "rel=next"
            })
            .then(|| url.trim().trim_start_matches('<').trim_end_matches('>'))
    })?;
    let query = next.split_once('?')?.1;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(hi * 16 + lo);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_link_is_found() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::LINK,
            HeaderValue::from_static(
                r#"<https://api.github.com/app/hook/deliveries?per_page=2&cursor=v1_12%2B3>; rel="next", <https://api.github.com/x?page=9>; rel="last""#,
            ),
        );
        assert_eq!(
            next_link_param(&headers, "cursor").as_deref(),
            Some("v1_12+3")
        );
        assert_eq!(next_link_param(&headers, "page"), None);
        assert_eq!(enc("dependabot[bot]"), "dependabot%5Bbot%5D");
    }

    #[test]
    fn messages_carry_validation_errors() {
        let m = error_message(
            r#"{"message":"Validation Failed","errors":[{"code":"custom","message":"Body is too long"}]}"#,
        );
        assert!(m.starts_with("Validation Failed (errors: "), "{m}");
        assert!(m.contains("Body is too long"));
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
    }
}
