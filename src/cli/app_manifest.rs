//! The GitHub App manifest: what `infradev app manifest` prints, to register the App through
//! GitHub's manifest flow (see docs/github-app.md). Pure.
//!
//! Manifest parameters (GitHub's "Registering a GitHub App from a manifest"): `url` is the only
//! required one; `name`, `description`, `hook_attributes` (`url`, `active`), `redirect_url`,
//! `callback_urls`, `setup_url`, `public`, `default_permissions`, `default_events`,
//! `request_oauth_on_install` and `setup_on_update` are optional. A manifest cannot set the
//! webhook secret: GitHub generates one and returns it, with the private key, when the
//! temporary code is converted (`POST /app-manifests/{code}/conversions`).
//!
//! `installation` and `installation_repositories` are not in [`EVENTS`]: GitHub sends them
//! to every App and they cannot be subscribed to ("All GitHub Apps receive this event by
//! default. You cannot manually subscribe to this event.").

use serde_json::{Map, Value, json};

/// Repository permissions the App asks for, and why.
pub const PERMISSIONS: &[(&str, &str, &str)] = &[
    (
        "checks",
        "write",
        "create and update the InfraDev check run, its annotations and its Re-grade button",
    ),
    (
        "pull_requests",
        "write",
        "read pull requests (head, base, labels, body) and receive pull_request events",
    ),
    (
        "issues",
        "write",
        "post and edit the sticky comment and command replies, and receive issue_comment events",
    ),
    (
        "contents",
        "read",
        "fetch the task's commits and the pull request head with the installation token",
    ),
    (
        "metadata",
        "read",
        "required by every App: repository names and basic information",
    ),
];

/// Webhook events the App subscribes to, and why.
pub const EVENTS: &[(&str, &str)] = &[
    (
        "pull_request",
        "opened, synchronize, reopened, ready_for_review, labeled and closed: grade or cancel",
    ),
    (
        "check_run",
        "rerequested (Re-run) and requested_action (the Re-grade button)",
    ),
    ("check_suite", "rerequested (Re-run all checks)"),
    (
        "issue_comment",
        "/infradev commands in pull request comments",
    ),
];

/// The manifest for an App called `name`, with homepage `url`, delivering webhooks to
/// `webhook_url`. Private to the account that registers it.
pub fn app_manifest(name: &str, url: &str, webhook_url: &str) -> Value {
    let permissions: Map<String, Value> = PERMISSIONS
        .iter()
        .map(|(name, access, _)| ((*name).to_owned(), Value::from(*access)))
        .collect();
    let events: Vec<&str> = EVENTS.iter().map(|(event, _)| *event).collect();
    json!({
        "name": name,
        "url": url,
        "description": "Grades AI-written pull requests with the task's official tests and \
                        hidden probes, and reports failure categories.",
        "hook_attributes": { "url": webhook_url, "active": true },
        "public": false,
        "default_permissions": permissions,
        "default_events": events,
    })
}

/// What the App also needs when it hands grades to self-hosted GitHub Actions runners in a
/// grader repository (docs/scale-out.md): dispatch and cancel runs there, and hear about them.
pub const ACTIONS_BACKEND_PERMISSIONS: &[(&str, &str, &str)] = &[(
    "actions",
    "write",
    "dispatch the grading workflow in the grader repository, read and cancel its runs",
)];
pub const ACTIONS_BACKEND_EVENTS: &[(&str, &str)] = &[
    (
        "workflow_run",
        "a dispatched grading run was queued, started or finished",
    ),
    (
        "workflow_job",
        "a grading job's runner started, finished or was lost",
    ),
];

/// Adds [`ACTIONS_BACKEND_PERMISSIONS`] and [`ACTIONS_BACKEND_EVENTS`] to a manifest.
pub fn with_actions_backend(mut manifest: Value) -> Value {
    for (name, access, _) in ACTIONS_BACKEND_PERMISSIONS {
        manifest["default_permissions"][*name] = Value::from(*access);
    }
    if let Some(events) = manifest["default_events"].as_array_mut() {
        events.extend(ACTIONS_BACKEND_EVENTS.iter().map(|(e, _)| Value::from(*e)));
    }
    manifest
}

/// [`app_manifest`] with the `redirect_url` GitHub sends the browser to, with `?code=…`,
/// after the App is registered.
pub fn app_manifest_with_redirect(
    name: &str,
    url: &str,
    webhook_url: &str,
    redirect_url: &str,
) -> Value {
    let mut manifest = app_manifest(name, url, webhook_url);
    manifest["redirect_url"] = Value::from(redirect_url);
    manifest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_actions_backend_adds_actions_write_and_the_run_events() {
        let plain = app_manifest("I", "https://u", "https://u/webhook");
        assert!(plain["default_permissions"].get("actions").is_none());
        let m = with_actions_backend(plain);
        assert_eq!(m["default_permissions"]["actions"], "write");
        assert_eq!(m["default_permissions"]["checks"], "write");
        let events: Vec<&str> = m["default_events"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(events.contains(&"workflow_run") && events.contains(&"workflow_job"));
        assert!(events.contains(&"pull_request"));
    }

    #[test]
    fn manifest() {
        let manifest = app_manifest(
            "InfraDev (example)",
            "https://infradev.example.org",
            "https://infradev.example.org/webhook",
        );
        insta::assert_json_snapshot!(manifest, @r#"
        {
          "default_events": [
            "pull_request",
            "check_run",
            "check_suite",
            "issue_comment"
          ],
          "default_permissions": {
            "checks": "write",
            "contents": "read",
            "issues": "write",
            "metadata": "read",
            "pull_requests": "write"
          },
          "description": "Grades AI-written pull requests with the task's official tests and hidden probes, and reports failure categories.",
          "hook_attributes": {
            "active": true,
            "url": "https://infradev.example.org/webhook"
          },
          "name": "InfraDev (example)",
          "public": false,
          "url": "https://infradev.example.org"
        }
        "#);
    }

    #[test]
    fn manifest_with_redirect() {
        let manifest = app_manifest_with_redirect(
            "InfraDev",
            "https://infradev.example.org",
            "https://infradev.example.org/webhook",
            "https://infradev.example.org/app/created",
        );
        assert_eq!(
            manifest["redirect_url"],
            "https://infradev.example.org/app/created"
        );
        assert_eq!(manifest["hook_attributes"]["active"], true);
    }

    #[test]
    fn events_match_permissions() {
        let granted = |name: &str| PERMISSIONS.iter().any(|(p, _, _)| *p == name);
        for (event, _) in EVENTS {
            let needs = match *event {
                "pull_request" => "pull_requests",
                "check_run" | "check_suite" => "checks",
                "issue_comment" => "issues",
                other => panic!("no permission known for {other}"),
            };
            assert!(granted(needs), "{event} needs {needs}");
        }
        let events: Vec<&str> = EVENTS.iter().map(|(e, _)| *e).collect();
        assert!(!events.contains(&"installation"));
        assert!(!events.contains(&"installation_repositories"));
    }
}
