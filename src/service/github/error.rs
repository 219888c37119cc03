//! Errors of the GitHub client and their retry classification. We own retries (the outbox does
//! them); this module only says whether and when a failed call may be tried again.

use std::time::Duration;

/// What a caller should do with a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Try again, not before this long.
    After(Duration),
    /// Trying again cannot help (bad request, not found, bad credentials, body too long).
    Never,
}

/// How waits are bounded and scaled. Production uses [`RetryPolicy::default`] (1 s to 15 min,
/// unscaled); tests shrink it so that a retried call does not sleep for real minutes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// The shortest wait returned.
    pub min: Duration,
    /// The longest wait returned.
    pub max: Duration,
    /// Every wait GitHub asked for is multiplied by this before clamping.
    pub scale: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            min: Duration::from_secs(1),
            max: Duration::from_secs(15 * 60),
            scale: 1.0,
        }
    }
}

impl RetryPolicy {
    /// Scale and clamp a raw wait.
    pub fn bound(&self, raw: Duration) -> Duration {
        let scaled = raw.mul_f64(self.scale.max(0.0));
        scaled.clamp(self.min, self.max.max(self.min))
    }
}

/// `wait` plus up to a tenth more, at random: callers that were told to wait the same time
/// do not all come back at the same instant. Never less than `wait`.
pub fn jitter(wait: Duration) -> Duration {
    let fraction = (uuid::Uuid::new_v4().as_u128() % 1000) as f64 / 10_000.0;
    wait + wait.mul_f64(fraction)
}

/// The wait after a 5xx or an unreachable GitHub, before scaling and clamping.
pub const SERVER_ERROR_WAIT: Duration = Duration::from_secs(5);
/// The wait after a secondary rate limit that names no wait (GitHub: "at least one minute").
pub const SECONDARY_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// A failed GitHub call. Messages never contain a token or the App key.
#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    /// GitHub answered with a status that is not a success.
    #[error("GitHub answered {status} to {method} {path}: {message}")]
    Api {
        method: String,
        path: String,
        status: u16,
        /// GitHub's `message` (and `errors`, for a 422), or the start of the body.
        message: String,
        /// The `retry-after` header.
        retry_after: Option<Duration>,
        /// The `x-ratelimit-remaining` header.
        ratelimit_remaining: Option<u64>,
        /// Time left until `x-ratelimit-reset`, measured when the answer arrived.
        ratelimit_reset_in: Option<Duration>,
    },
    /// No answer: connection refused, timeout, TLS.
    #[error("could not reach GitHub for {method} {path}: {message}")]
    Transport {
        method: String,
        path: String,
        message: String,
    },
    /// A success whose body is not what the API description promises.
    #[error("unexpected answer from GitHub to {method} {path}: {message}")]
    Decode {
        method: String,
        path: String,
        message: String,
    },
    /// The App JWT could not be made (bad key).
    #[error("GitHub App authentication: {0}")]
    Auth(String),
    /// We refused to send something GitHub would reject.
    #[error("invalid request to GitHub: {0}")]
    InvalidInput(String),
}

impl GitHubError {
    /// The HTTP status GitHub answered, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            GitHubError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether this is GitHub saying "not found".
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// Classification under the production policy (waits clamped to 1 s ..= 15 min).
    pub fn retry(&self) -> Retry {
        self.retry_with(&RetryPolicy::default())
    }

    /// Classification under `policy`:
    /// - 403/429 with `retry-after` → that long;
    /// - 403/429 with `x-ratelimit-remaining: 0` → until `x-ratelimit-reset`;
    /// - 429, or a 403 that mentions a secondary rate limit, without those headers → 60 s;
    /// - 5xx (honouring `retry-after`) and no answer at all → 5 s;
    /// - every other 4xx, a body we cannot read, a bad key, a refused input → never.
    pub fn retry_with(&self, policy: &RetryPolicy) -> Retry {
        match self.raw_wait() {
            Some(raw) => Retry::After(policy.bound(raw)),
            None => Retry::Never,
        }
    }

    fn raw_wait(&self) -> Option<Duration> {
        match self {
            GitHubError::Api {
                status,
                message,
                retry_after,
                ratelimit_remaining,
                ratelimit_reset_in,
                ..
            } => {
                let status = *status;
                if status == 403 || status == 429 {
                    if let Some(wait) = retry_after {
                        return Some(*wait);
                    }
                    if *ratelimit_remaining == Some(0) {
                        return Some(ratelimit_reset_in.unwrap_or(SECONDARY_RATE_LIMIT_WAIT));
                    }
                    let lower = message.to_ascii_lowercase();
                    if status == 429
                        || lower.contains("secondary rate limit")
                        || lower.contains("abuse detection")
                    {
                        return Some(SECONDARY_RATE_LIMIT_WAIT);
                    }
                    return None;
                }
                if (500..600).contains(&status) {
                    return Some(retry_after.unwrap_or(SERVER_ERROR_WAIT));
                }
                None
            }
            GitHubError::Transport { .. } => Some(SERVER_ERROR_WAIT),
            GitHubError::Decode { .. } | GitHubError::Auth(_) | GitHubError::InvalidInput(_) => {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, message: &str) -> GitHubError {
        GitHubError::Api {
            method: "GET".into(),
            path: "/x".into(),
            status,
            message: message.into(),
            retry_after: None,
            ratelimit_remaining: None,
            ratelimit_reset_in: None,
        }
    }

    #[test]
    fn jitter_adds_at_most_a_tenth_and_never_less() {
        let wait = Duration::from_secs(10);
        let waits: Vec<Duration> = (0..200).map(|_| jitter(wait)).collect();
        assert!(
            waits
                .iter()
                .all(|w| *w >= wait && *w <= Duration::from_secs(11))
        );
        assert!(waits.iter().any(|w| *w != waits[0]), "not all the same");
    }

    #[test]
    fn classification_table() {
        let s = Duration::from_secs;
        assert_eq!(api(500, "boom").retry(), Retry::After(s(5)));
        assert_eq!(api(502, "").retry(), Retry::After(s(5)));
        assert_eq!(api(429, "").retry(), Retry::After(s(60)));
        assert_eq!(
            api(403, "You have exceeded a secondary rate limit").retry(),
            Retry::After(s(60))
        );
        assert_eq!(
            api(403, "Resource not accessible by integration").retry(),
            Retry::Never
        );
        assert_eq!(api(404, "Not Found").retry(), Retry::Never);
        assert_eq!(api(401, "Bad credentials").retry(), Retry::Never);
        assert_eq!(api(422, "Body is too long").retry(), Retry::Never);

        let mut limited = api(403, "API rate limit exceeded");
        if let GitHubError::Api {
            ratelimit_remaining,
            ratelimit_reset_in,
            ..
        } = &mut limited
        {
            *ratelimit_remaining = Some(0);
            *ratelimit_reset_in = Some(s(3600));
        }
        assert_eq!(
            limited.retry(),
            Retry::After(s(15 * 60)),
            "clamped to 15 min"
        );

        let mut after = api(429, "");
        if let GitHubError::Api { retry_after, .. } = &mut after {
            *retry_after = Some(Duration::ZERO);
        }
        assert_eq!(after.retry(), Retry::After(s(1)), "clamped to 1 s");

        let quick = RetryPolicy {
            min: Duration::from_millis(1),
            max: Duration::from_millis(100),
            scale: 0.001,
        };
        assert_eq!(
            api(429, "").retry_with(&quick),
            Retry::After(Duration::from_millis(60))
        );
        assert_eq!(
            GitHubError::InvalidInput("x".into()).retry_with(&quick),
            Retry::Never
        );
    }
}
