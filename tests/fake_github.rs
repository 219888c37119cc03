//! Our GitHub client (`infradev::service::github`) against the fake github.com, which checks every
//! request against GitHub's OpenAPI description and authentication rules.

mod support;

use std::time::Duration;

use chrono::Utc;
use infradev::service::github::{
    Annotation, AnnotationLevel, CheckAction, CheckOutput, CheckRunCreate, CheckRunUpdate,
    Conclusion, GitHubApp, GitHubError, Retry, RetryPolicy, Status,
};
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use support::fake_github::{APP_ID, Failure, FakeGitHub, FakePull, HeadRepo, NewDelivery, app_key};

const REPO: &str = "acme/widgets";
const INSTALLATION: u64 = 77;
const SHA: &str = "6dcb09b5b57875f334f61aebed695e2e4193db5e";
const MARKER: &str = "<!-- infradev:sticky -->";

async fn setup() -> (FakeGitHub, GitHubApp) {
    let fake = FakeGitHub::start().await;
    fake.add_installation(INSTALLATION, &[REPO]);
    let app = fake.app();
    (fake, app)
}

fn annotations(n: usize) -> Vec<Annotation> {
    (0..n)
        .map(|i| Annotation {
            path: format!("src/file_{i}.py"),
            start_line: i as u32 + 1,
            end_line: i as u32 + 2,
            level: AnnotationLevel::Failure,
            message: format!("probe {i} failed"),
            title: Some(format!("probe {i}")),
        })
        .collect()
}

fn regrade() -> CheckAction {
    CheckAction {
        label: "Re-grade".into(),
        description: "Grade this head again".into(),
        identifier: "regrade".into(),
    }
}

#[tokio::test]
async fn jwt_is_accepted_and_the_installation_token_is_minted_once() {
    let (fake, app) = setup().await;
    let first = app.installation_token(INSTALLATION).await.unwrap();
    let second = app.installation_token(INSTALLATION).await.unwrap();
    assert_eq!(first.expose_secret(), second.expose_secret());
    assert!(first.expose_secret().starts_with("ghs_"));
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    client.permission("nobody").await.unwrap();
    assert_eq!(fake.tokens_minted(INSTALLATION), 1, "the token is cached");
    let mints = fake.requests_to("apps/create-installation-access-token");
    assert_eq!(mints.len(), 1);
    assert_eq!(mints[0].caller, "jwt");
    assert_eq!(mints[0].status, 201);
    let lookups = fake.requests_to("repos/get-collaborator-permission-level");
    assert_eq!(lookups[0].caller, format!("installation:{INSTALLATION}"));
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_token_within_five_minutes_of_expiry_is_renewed() {
    let (fake, app) = setup().await;
    fake.set_token_ttl(chrono::Duration::minutes(4));
    app.installation_token(INSTALLATION).await.unwrap();
    app.installation_token(INSTALLATION).await.unwrap();
    assert_eq!(
        fake.tokens_minted(INSTALLATION),
        2,
        "4 minutes left is too little"
    );
    fake.set_token_ttl(chrono::Duration::minutes(6));
    app.installation_token(INSTALLATION).await.unwrap();
    app.installation_token(INSTALLATION).await.unwrap();
    assert_eq!(fake.tokens_minted(INSTALLATION), 3);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_revoked_token_is_replaced_once_and_the_call_succeeds() {
    let (fake, app) = setup().await;
    fake.set_permission(REPO, "alice", "write");
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    fake.revoke_tokens(INSTALLATION);
    assert_eq!(client.permission("alice").await.unwrap(), "write");
    assert_eq!(fake.tokens_minted(INSTALLATION), 2);
    let statuses: Vec<u16> = fake
        .requests_to("repos/get-collaborator-permission-level")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [401, 200]);
    fake.assert_no_violations();
}

#[tokio::test]
async fn check_run_created_then_completed_with_120_annotations_in_batches_of_50() {
    let (fake, app) = setup().await;
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    let mut run = CheckRunCreate::queued("InfraDev", SHA);
    run.external_id = Some("job-17".into());
    run.status = Status::InProgress;
    run.started_at = Some(Utc::now());
    run.output = Some(CheckOutput {
        title: "Grading".into(),
        summary: "The grade is running.".into(),
        ..Default::default()
    });
    let id = client.create_check_run(&run).await.unwrap();

    let update = CheckRunUpdate {
        conclusion: Some(Conclusion::Failure),
        completed_at: Some(Utc::now()),
        output: Some(CheckOutput {
            title: "Unresolved: 120 probes failed".into(),
            summary: "Failure categories: …".into(),
            text: Some("details".into()),
            annotations: annotations(120),
        }),
        actions: Some(vec![regrade()]),
        ..Default::default()
    };
    client.update_check_run(id, &update).await.unwrap();

    let patches = fake.requests_to("checks/update");
    let sizes: Vec<usize> = patches
        .iter()
        .map(|r| {
            r.body.as_ref().unwrap()["output"]["annotations"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .collect();
    assert_eq!(sizes, [50, 50, 20]);
    let first = patches[0].body.as_ref().unwrap();
    assert_eq!(first["conclusion"], "failure");
    assert_eq!(first["status"], "completed");
    assert_eq!(first["actions"][0]["identifier"], "regrade");

    let runs = fake.check_runs(REPO);
    assert_eq!(runs.len(), 1);
    let held = &runs[0];
    assert_eq!(held.id, id);
    assert_eq!(held.annotations.len(), 120);
    assert_eq!(held.annotations[119]["path"], "src/file_119.py");
    assert_eq!(held.status, "completed");
    assert_eq!(held.conclusion.as_deref(), Some("failure"));
    assert_eq!(held.external_id.as_deref(), Some("job-17"));
    assert_eq!(held.title.as_deref(), Some("Unresolved: 120 probes failed"));
    assert_eq!(held.actions.len(), 1);
    assert_eq!(held.history.len(), 4, "one POST and three PATCHes");

    assert_eq!(
        client
            .find_check_run_by_external_id(SHA, "InfraDev", "job-17")
            .await
            .unwrap(),
        Some(id)
    );
    assert_eq!(
        client
            .find_check_run_by_external_id(SHA, "InfraDev", "job-18")
            .await
            .unwrap(),
        None
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_completed_run_created_with_60_annotations_appends_the_rest() {
    let (fake, app) = setup().await;
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    let mut run = CheckRunCreate::queued("InfraDev", SHA);
    run.conclusion = Some(Conclusion::Neutral);
    run.output = Some(CheckOutput {
        title: "No task".into(),
        summary: "x".repeat(70_000),
        text: None,
        annotations: annotations(60),
    });
    client.create_check_run(&run).await.unwrap();
    assert_eq!(fake.requests_to("checks/create").len(), 1);
    assert_eq!(fake.requests_to("checks/update").len(), 1);
    let held = &fake.check_runs(REPO)[0];
    assert_eq!(held.annotations.len(), 60);
    assert_eq!(held.status, "completed");
    assert_eq!(
        held.summary.as_ref().unwrap().chars().count(),
        65_535,
        "cut to the limit"
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn many_runs_on_one_head_are_searched_across_pages() {
    let (fake, app) = setup().await;
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    let mut wanted = 0;
    for i in 0..130 {
        let mut run = CheckRunCreate::queued("InfraDev", SHA);
        run.external_id = Some(format!("job-{i}"));
        let id = client.create_check_run(&run).await.unwrap();
        if i == 3 {
            wanted = id;
        }
    }
    let found = client
        .find_check_run_by_external_id(SHA, "InfraDev", "job-3")
        .await
        .unwrap();
    assert_eq!(found, Some(wanted));
    assert_eq!(fake.requests_to("checks/list-for-ref").len(), 2);
    fake.assert_no_violations();
}

#[tokio::test]
async fn sticky_comment_is_found_created_and_updated() {
    let (fake, app) = setup().await;
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    // 150 comments before ours, one of them a human quoting our marker.
    for i in 0..150 {
        let body = if i == 7 {
            format!("I copied {MARKER} by hand")
        } else {
            format!("comment {i}")
        };
        fake.add_comment(REPO, 5, "someone", &body);
    }
    assert_eq!(
        client.find_comment_with_marker(5, MARKER).await.unwrap(),
        None
    );

    let body = format!("{MARKER}\n**InfraDev**: unresolved");
    let id = client.create_comment(5, &body).await.unwrap();
    assert_eq!(
        client.find_comment_with_marker(5, MARKER).await.unwrap(),
        Some(id)
    );
    client
        .update_comment(id, &format!("{MARKER}\n**InfraDev**: resolved"))
        .await
        .unwrap();

    let ours: Vec<_> = fake
        .comments(REPO, 5)
        .into_iter()
        .filter(|c| c.by_app)
        .collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].author, fake.bot_login());
    assert!(ours[0].body.ends_with("resolved") && !ours[0].body.ends_with("unresolved"));
    assert_eq!(ours[0].edits, [body]);

    // Someone deletes it: the update is a 404 the caller can see.
    fake.delete_comment(REPO, id);
    let err = client.update_comment(id, "x").await.unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.retry(), Retry::Never);

    // Too long for GitHub: refused here, nothing sent.
    let before = fake.requests().len();
    let err = client
        .create_comment(5, &"x".repeat(65_537))
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::InvalidInput(_)));
    assert_eq!(fake.requests().len(), before);
    fake.assert_no_violations();
}

#[tokio::test]
async fn permissions_are_read_from_role_name() {
    let (fake, app) = setup().await;
    for (user, role) in [
        ("alice", "admin"),
        ("bob", "maintain"),
        ("carol", "triage"),
        ("dave", "read"),
        ("erin", "none"),
        ("dependabot[bot]", "write"),
    ] {
        fake.set_permission(REPO, user, role);
    }
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    for (user, role) in [
        ("alice", "admin"),
        ("bob", "maintain"),
        ("carol", "triage"),
        ("dave", "read"),
        ("erin", "none"),
        ("dependabot[bot]", "write"),
        ("stranger", "none"),
    ] {
        assert_eq!(client.permission(user).await.unwrap(), role, "{user}");
    }
    fake.assert_no_violations();
}

#[tokio::test]
async fn pull_requests_are_summarised() {
    let (fake, app) = setup().await;
    let mut pr = FakePull::new(12, SHA);
    pr.head_repo = HeadRepo::Fork("agent/widgets".into());
    pr.head_ref = "fix-allocator".into();
    pr.draft = true;
    pr.author = "coding-agent[bot]".into();
    pr.author_is_bot = true;
    pr.labels = vec!["infradev".into(), "task:block-allocator".into()];
    fake.add_pull(REPO, pr);
    let mut closed = FakePull::new(13, SHA);
    closed.state_open = false;
    closed.body = None;
    fake.add_pull(REPO, closed);

    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    let s = client.pull_request(12).await.unwrap();
    assert_eq!(s.number, 12);
    assert_eq!(s.head_sha, SHA);
    assert_eq!(s.head_ref, "fix-allocator");
    assert_eq!(s.base_ref, "main");
    assert_eq!(s.head_repo_full_name.as_deref(), Some("agent/widgets"));
    assert_eq!(
        s.head_clone_url.as_deref(),
        Some("https://github.com/agent/widgets.git")
    );
    assert!(s.draft && s.state_open && s.author_is_bot);
    assert_eq!(s.author_login, "coding-agent[bot]");
    assert_eq!(s.labels, ["infradev", "task:block-allocator"]);

    let s = client.pull_request(13).await.unwrap();
    assert_eq!(s.head_repo_full_name.as_deref(), Some(REPO));
    assert_eq!(
        s.head_clone_url.as_deref(),
        Some("https://github.com/acme/widgets.git")
    );
    assert!(!s.state_open && !s.draft && !s.author_is_bot);
    assert_eq!(s.body, None);

    let err = client.pull_request(99).await.unwrap_err();
    assert_eq!(err.status(), Some(404));
    fake.assert_no_violations();
}

#[tokio::test]
async fn failures_are_classified_from_status_and_headers() {
    let (fake, app) = setup().await;
    fake.add_pull(REPO, FakePull::new(1, SHA));
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    let route = "GET /repos/*/*/pulls/*";
    let status = |status: u16, message: &str| Failure::Status {
        status,
        message: message.into(),
    };
    // Each failure, and the wait expected: `None` = never retry, `Some((lo, hi))` seconds.
    let cases = [
        (Failure::ServerError, Some((5, 5))),
        (status(503, "Service Unavailable"), Some((5, 5))),
        (Failure::RateLimited { retry_after_s: 7 }, Some((7, 7))),
        (Failure::SecondaryRateLimit, Some((60, 60))),
        (
            Failure::PrimaryExhausted { reset_in_s: 120 },
            Some((118, 120)),
        ),
        (
            Failure::PrimaryExhausted { reset_in_s: 7200 },
            Some((900, 900)),
        ),
        (status(422, "Validation Failed"), None),
        (status(403, "Resource not accessible by integration"), None),
    ];
    for (failure, expected) in cases {
        fake.fail_next(route, 1, failure.clone());
        let err = client.pull_request(1).await.unwrap_err();
        let ok = match (err.retry(), expected) {
            (Retry::Never, None) => true,
            (Retry::After(d), Some((lo, hi))) => {
                d >= Duration::from_secs(lo) && d <= Duration::from_secs(hi)
            }
            _ => false,
        };
        assert!(ok, "{failure:?} → {:?} ({err})", err.retry());
        // The next try goes through: the failure was only injected once.
        client.pull_request(1).await.unwrap();
    }

    // Tests shrink the waits; the ratio GitHub asked for is kept.
    let quick = RetryPolicy {
        min: Duration::from_millis(1),
        max: Duration::from_millis(500),
        scale: 0.001,
    };
    fake.fail_next(route, 1, Failure::RateLimited { retry_after_s: 7 });
    let err = client.pull_request(1).await.unwrap_err();
    assert_eq!(
        err.retry_with(&quick),
        Retry::After(Duration::from_millis(7))
    );

    // No retries inside the client: each failure above cost exactly one request.
    assert_eq!(fake.requests_to("pulls/get").len(), 2 * 8 + 1);
    fake.assert_no_violations();
}

#[tokio::test]
async fn app_level_failures_classify_too() {
    let (fake, app) = setup().await;
    fake.fail_next(
        "POST /app/installations/*/access_tokens",
        1,
        Failure::ServerError,
    );
    let err = app
        .client(INSTALLATION, "acme", "widgets")
        .await
        .unwrap_err();
    assert_eq!(err.retry(), Retry::After(Duration::from_secs(5)));
    app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    let err = app.installation_token(999).await.unwrap_err();
    assert_eq!((err.status(), err.retry()), (Some(404), Retry::Never));
    fake.assert_no_violations();
}

/// A raw request, with the right headers, through reqwest.
async fn raw(
    fake: &FakeGitHub,
    method: reqwest::Method,
    path: &str,
    auth: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", fake.url()))
        .header("authorization", auth)
        .header("x-github-api-version", "2022-11-28")
        .header("user-agent", "infradev-test");
    if let Some(body) = body {
        req = req.json(&body);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn the_fake_rejects_what_the_api_description_rejects() {
    let (fake, app) = setup().await;
    let client = app.client(INSTALLATION, "acme", "widgets").await.unwrap();
    let id = client
        .create_check_run(&CheckRunCreate::queued("InfraDev", SHA))
        .await
        .unwrap();
    fake.assert_no_violations();
    let token = format!(
        "Bearer {}",
        app.installation_token(INSTALLATION)
            .await
            .unwrap()
            .expose_secret()
    );

    // An enum value GitHub does not know.
    let path = format!("/repos/acme/widgets/check-runs/{id}");
    let resp = raw(
        &fake,
        reqwest::Method::PATCH,
        &path,
        &token,
        Some(json!({"conclusion": "bogus"})),
    )
    .await;
    assert_eq!(resp.status(), 422);
    let v = fake.clear_violations();
    assert!(v.len() == 1 && v[0].contains("bogus"), "{v:#?}");
    assert_eq!(fake.check_runs(REPO)[0].conclusion, None, "nothing changed");

    // `completed` without a conclusion (the oneOf of the create body).
    let resp = raw(
        &fake,
        reqwest::Method::POST,
        "/repos/acme/widgets/check-runs",
        &token,
        Some(json!({"name": "InfraDev", "head_sha": SHA, "status": "completed"})),
    )
    .await;
    assert_eq!(resp.status(), 422);
    assert_eq!(fake.clear_violations().len(), 1);

    // 51 annotations in one request.
    let many: Vec<Value> = (0..51)
        .map(|i| json!({"path": "a.py", "start_line": i + 1, "end_line": i + 1, "annotation_level": "notice", "message": "m"}))
        .collect();
    let body = json!({"output": {"title": "t", "summary": "s", "annotations": many}});
    raw(&fake, reqwest::Method::PATCH, &path, &token, Some(body)).await;
    assert!(
        fake.clear_violations()
            .iter()
            .any(|v| v.contains("annotations"))
    );

    // A timestamp that is not RFC 3339, a path parameter that is not an integer.
    let body = json!({"started_at": "yesterday"});
    raw(&fake, reqwest::Method::PATCH, &path, &token, Some(body)).await;
    raw(
        &fake,
        reqwest::Method::GET,
        "/repos/acme/widgets/pulls/abc",
        &token,
        None,
    )
    .await;
    let v = fake.clear_violations();
    assert!(
        v.len() == 2 && v[0].contains("date-time") && v[1].contains("pull_number"),
        "{v:#?}"
    );

    // A path the description does not have, a query parameter it does not know.
    raw(
        &fake,
        reqwest::Method::GET,
        "/repos/acme/widgets/nothing-here",
        &token,
        None,
    )
    .await;
    raw(
        &fake,
        reqwest::Method::GET,
        "/repos/acme/widgets/issues/1/comments?per_pgae=5",
        &token,
        None,
    )
    .await;
    let v = fake.clear_violations();
    assert!(v[0].contains("no operation"), "{v:#?}");
    assert!(v[1].contains("unknown query parameter per_pgae"), "{v:#?}");

    // A wrong API version, and none.
    let resp = reqwest::Client::new()
        .get(format!("{}/repos/acme/widgets/pulls/1", fake.url()))
        .header("authorization", &token)
        .header("user-agent", "x")
        .header("x-github-api-version", "2026-03-10")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    assert!(fake.clear_violations()[0].contains("X-GitHub-Api-Version"));

    // A JWT on a repository endpoint, a token on an App endpoint.
    let jwt = format!("Bearer {}", app.jwt().unwrap().expose_secret());
    raw(
        &fake,
        reqwest::Method::GET,
        "/repos/acme/widgets/pulls/1",
        &jwt,
        None,
    )
    .await;
    raw(
        &fake,
        reqwest::Method::GET,
        "/app/hook/deliveries",
        &token,
        None,
    )
    .await;
    assert_eq!(fake.clear_violations().len(), 2);
    fake.assert_no_violations();
}

#[tokio::test]
async fn the_fake_checks_the_app_jwt() {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let (fake, _app) = setup().await;
    let key = EncodingKey::from_rsa_pem(app_key().private_pem.as_bytes()).unwrap();
    let now = Utc::now().timestamp();
    let sign = |iat: i64, exp: i64, iss: Value| {
        let claims = json!({"iat": iat, "exp": exp, "iss": iss});
        format!(
            "Bearer {}",
            jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key).unwrap()
        )
    };
    let path = format!("/app/installations/{INSTALLATION}/access_tokens");
    let good = sign(now - 60, now + 540, json!(APP_ID));
    let status = raw(&fake, reqwest::Method::POST, &path, &good, None)
        .await
        .status();
    assert_eq!(status, 201, "{:?}", fake.violations());
    fake.assert_no_violations();

    for (what, auth) in [
        ("lives too long", sign(now - 60, now + 3600, json!(APP_ID))),
        (
            "issued in the future",
            sign(now + 120, now + 500, json!(APP_ID)),
        ),
        ("expired", sign(now - 700, now - 100, json!(APP_ID))),
        ("another App", sign(now - 60, now + 540, json!("1"))),
        ("tampered", {
            let mut t = good.clone();
            let last = t.pop().unwrap();
            t.push(if last == 'A' { 'B' } else { 'A' });
            t
        }),
    ] {
        let status = raw(&fake, reqwest::Method::POST, &path, &auth, None)
            .await
            .status();
        assert_eq!(status, 401, "{what}");
        assert_eq!(fake.clear_violations().len(), 1, "{what}");
    }
}

#[tokio::test]
async fn failed_deliveries_are_listed_across_pages_and_redelivered() {
    let (fake, app) = setup().await;
    let minutes = chrono::Duration::minutes;
    let at = |ago: chrono::Duration, mut d: NewDelivery| {
        d.delivered_at = Utc::now() - ago;
        d.installation_id = Some(INSTALLATION);
        d
    };
    let lost = fake.add_delivery(at(minutes(50), {
        let mut d = NewDelivery::new("guid-lost", "pull_request", 502);
        d.action = Some("opened".into());
        d
    }));
    fake.add_delivery(at(
        minutes(49),
        NewDelivery::new("guid-ok", "pull_request", 200),
    ));
    fake.add_delivery(at(
        minutes(48),
        NewDelivery::new("guid-fixed", "check_run", 500),
    ));
    fake.add_delivery(at(minutes(47), {
        let mut d = NewDelivery::new("guid-fixed", "check_run", 200);
        d.redelivery = true;
        d
    }));
    fake.add_delivery(at(
        chrono::Duration::days(4),
        NewDelivery::new("guid-old", "issue_comment", 500),
    ));
    // 150 newer successful deliveries push the failed one to the second page.
    for i in 0..150 {
        fake.add_delivery(at(
            minutes(40 - i / 10),
            NewDelivery::new(&format!("guid-{i}"), "ping", 200),
        ));
    }

    let since = Utc::now() - chrono::Duration::days(3);
    let failed = app.list_failed_deliveries(since).await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:#?}");
    let f = &failed[0];
    assert_eq!(
        (f.id, f.guid.as_str(), f.status_code),
        (lost, "guid-lost", 502)
    );
    assert_eq!(f.event, "pull_request");
    assert_eq!(f.action.as_deref(), Some("opened"));
    assert_eq!(f.installation_id, Some(INSTALLATION));
    let pages = fake.requests_to("apps/list-webhook-deliveries");
    assert!(
        pages.len() >= 2 && pages[1].query.contains("cursor="),
        "{pages:#?}"
    );

    app.redeliver(f.id).await.unwrap();
    let deliveries = fake.deliveries();
    let original = deliveries.iter().find(|d| d.id == lost).unwrap();
    assert_eq!(original.redelivery_requests, 1);
    let again = deliveries
        .iter()
        .find(|d| d.guid == "guid-lost" && d.redelivery)
        .unwrap();
    assert_eq!(again.status, "OK");

    assert!(app.list_failed_deliveries(since).await.unwrap().is_empty());
    let err = app.redeliver(123_456_789).await.unwrap_err();
    assert_eq!(err.status(), Some(404));
    fake.assert_no_violations();
}

#[tokio::test]
async fn webhooks_are_sent_signed_and_redelivered_with_the_same_guid() {
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use hmac::{Hmac, Mac};
    use std::sync::{Arc, Mutex};

    type Seen = Arc<Mutex<Vec<(String, String, bool)>>>;
    async fn receive(
        State(seen): State<(Seen, Arc<Mutex<u16>>)>,
        headers: HeaderMap,
        body: axum::body::Bytes,
    ) -> StatusCode {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(&body);
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        let h = |n: &str| headers.get(n).unwrap().to_str().unwrap().to_string();
        seen.0.lock().unwrap().push((
            h("x-github-event"),
            h("x-github-delivery"),
            h("x-hub-signature-256") == expected,
        ));
        StatusCode::from_u16(*seen.1.lock().unwrap()).unwrap()
    }
    let seen: Seen = Arc::default();
    let answer = Arc::new(Mutex::new(500u16));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("http://{}/webhook", listener.local_addr().unwrap());
    let router = axum::Router::new()
        .route("/webhook", axum::routing::post(receive))
        .with_state((seen.clone(), answer.clone()));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let (fake, app) = setup().await;
    fake.set_webhook_target(&target, "s3cret");
    let sent = fake
        .send_webhook(
            "pull_request",
            json!({"action": "opened", "installation": {"id": INSTALLATION}}),
        )
        .await;
    assert_eq!(sent.status_code, 500);
    let failed = app
        .list_failed_deliveries(Utc::now() - chrono::Duration::hours(1))
        .await
        .unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].guid, sent.guid);

    *answer.lock().unwrap() = 202;
    app.redeliver(failed[0].id).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|(event, guid, signed)| event == "pull_request" && *guid == sent.guid && *signed)
    );
    assert!(
        app.list_failed_deliveries(Utc::now() - chrono::Duration::hours(1))
            .await
            .unwrap()
            .is_empty()
    );
    fake.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// GitHub Actions: the scale-out backend dispatches grades to the private grader repository.

const GRADER: &str = "acme/grader";
const GRADE_YML: &str = "grade.yml";

/// The inputs a grade dispatch carries (all strings, as GitHub requires).
fn dispatch_inputs(name: &str) -> serde_json::Map<String, Value> {
    [
        ("name", name),
        ("mirror_repo", "acme/widgets"),
        ("pr", "7"),
        ("head_sha", SHA),
        ("task", "example-block-allocator"),
        ("job_id", "42"),
        ("dispatch", "1"),
        ("result_url", "https://grader.example/jobs/42/result"),
        ("result_token", "tok-secret"),
        ("runs_on", r#"["self-hosted","gpu","gpus-4"]"#),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), json!(v)))
    .collect()
}

async fn grader_setup() -> (FakeGitHub, infradev::service::github::RepoClient) {
    let fake = FakeGitHub::start().await;
    fake.add_installation(INSTALLATION, &[REPO, GRADER]);
    fake.add_workflow(GRADER, GRADE_YML);
    let client = fake
        .app()
        .client(INSTALLATION, "acme", "grader")
        .await
        .unwrap();
    (fake, client)
}

#[tokio::test]
async fn a_dispatched_run_is_read_found_and_cancelled() {
    let (fake, client) = grader_setup().await;
    let inputs = dispatch_inputs("infradev-42-1");
    let run_id = client
        .dispatch_workflow(GRADE_YML, "main", &inputs)
        .await
        .unwrap()
        .expect("return_run_details gives the run id");

    // What GitHub received: the ref, the inputs as given, and the request for the run's id.
    let sent = fake.requests_to("actions/create-workflow-dispatch");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].path,
        "/repos/acme/grader/actions/workflows/grade.yml/dispatches"
    );
    let body = sent[0].body.as_ref().unwrap();
    assert_eq!(body["ref"], "main");
    assert_eq!(body["return_run_details"], true);
    assert_eq!(body["inputs"], Value::Object(inputs.clone()));
    assert_eq!(sent[0].status, 200);

    let runs = fake.workflow_runs(GRADER);
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(
        (
            run.id,
            run.workflow.as_str(),
            run.git_ref.as_str(),
            run.display_title.as_str(),
            run.status.as_str(),
            run.run_attempt,
            run.cancel_requested,
        ),
        (
            run_id,
            GRADE_YML,
            "main",
            "infradev-42-1",
            "queued",
            1,
            false
        )
    );
    assert_eq!(run.inputs, inputs);

    let got = client.workflow_run(run_id).await.unwrap();
    assert_eq!(
        got,
        infradev::service::github::WorkflowRunSummary {
            id: run_id,
            status: "queued".into(),
            conclusion: None,
            display_title: "infradev-42-1".into(),
            html_url: format!("https://github.com/{GRADER}/actions/runs/{run_id}"),
            run_attempt: 1,
        }
    );

    // The runner takes it.
    fake.set_workflow_run(GRADER, run_id, "in_progress", None);
    assert_eq!(
        client.workflow_run(run_id).await.unwrap().status,
        "in_progress"
    );

    // Found again by its name (after a crash between dispatching and recording the id).
    let found = client
        .find_workflow_run(GRADE_YML, "infradev-42-1")
        .await
        .unwrap()
        .expect("found by display_title");
    assert_eq!((found.id, found.status.as_str()), (run_id, "in_progress"));
    assert_eq!(
        client
            .find_workflow_run(GRADE_YML, "infradev-42-2")
            .await
            .unwrap(),
        None
    );
    let listed = fake.requests_to("actions/list-workflow-runs");
    assert!(
        listed[0].query.contains("event=workflow_dispatch"),
        "{}",
        listed[0].query
    );

    // Cancelled: GitHub accepts (202) and the run ends cancelled.
    client.cancel_workflow_run(run_id).await.unwrap();
    let run = &fake.workflow_runs(GRADER)[0];
    assert!(run.cancel_requested);
    assert_eq!(
        (run.status.as_str(), run.conclusion.as_deref()),
        ("completed", Some("cancelled"))
    );
    let got = client.workflow_run(run_id).await.unwrap();
    assert_eq!(got.conclusion.as_deref(), Some("cancelled"));

    // Cancelling a completed run is GitHub's 409, which is what we wanted anyway.
    client.cancel_workflow_run(run_id).await.unwrap();
    let cancels = fake.requests_to("actions/cancel-workflow-run");
    assert_eq!(
        cancels.iter().map(|r| r.status).collect::<Vec<_>>(),
        vec![202, 409]
    );

    // A run that ended on its own is left as it ended.
    let second = client
        .dispatch_workflow(GRADE_YML, "main", &dispatch_inputs("infradev-43-1"))
        .await
        .unwrap()
        .unwrap();
    fake.set_workflow_run(GRADER, second, "completed", Some("success"));
    client.cancel_workflow_run(second).await.unwrap();
    let run = fake.workflow_runs(GRADER)[1].clone();
    assert_eq!(
        (run.conclusion.as_deref(), run.cancel_requested),
        (Some("success"), false)
    );

    // Unknown runs are GitHub's 404, for reading and for cancelling.
    let err = client.workflow_run(999_999).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = client.cancel_workflow_run(999_999).await.unwrap_err();
    assert_eq!((err.status(), err.retry()), (Some(404), Retry::Never));
    fake.assert_no_violations();
}

#[tokio::test]
async fn find_workflow_run_takes_the_newest_match_across_pages() {
    let (fake, client) = grader_setup().await;
    let mut ids = Vec::new();
    for i in 0..120 {
        let name = if i == 3 || i == 110 {
            "infradev-7-1".to_string()
        } else {
            format!("infradev-{i}-1")
        };
        let id = client
            .dispatch_workflow(GRADE_YML, "main", &dispatch_inputs(&name))
            .await
            .unwrap()
            .unwrap();
        ids.push(id);
    }
    // Newest first: the oldest run is on the second page of 100.
    let oldest = client
        .find_workflow_run(GRADE_YML, "infradev-0-1")
        .await
        .unwrap()
        .expect("on page 2");
    assert_eq!(oldest.id, ids[0]);
    let pages: Vec<String> = fake
        .requests_to("actions/list-workflow-runs")
        .iter()
        .map(|r| r.query.clone())
        .collect();
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert!(pages[1].contains("page=2"), "{pages:?}");

    // Two runs with one name (never ours, but possible): the newer one.
    let dup = client
        .find_workflow_run(GRADE_YML, "infradev-7-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dup.id, ids[110]);
    // Exact match only.
    assert_eq!(
        client
            .find_workflow_run(GRADE_YML, "infradev-1")
            .await
            .unwrap(),
        None
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn dispatch_errors_are_github_s() {
    let (fake, client) = grader_setup().await;

    // A workflow file the grader repository does not have: GitHub's 404, never retried.
    let err = client
        .dispatch_workflow("missing.yml", "main", &dispatch_inputs("infradev-1-1"))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.retry(), Retry::Never);
    let err = client
        .find_workflow_run("missing.yml", "infradev-1-1")
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(fake.workflow_runs(GRADER).is_empty());
    fake.assert_no_violations();

    // What GitHub would refuse is refused before sending.
    let before = fake.requests().len();
    let mut bad = dispatch_inputs("infradev-1-1");
    bad.insert("pr".into(), json!(7));
    let err = client
        .dispatch_workflow(GRADE_YML, "main", &bad)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitHubError::InvalidInput(m) if m.contains("\"pr\"")),
        "{err}"
    );
    let err = client
        .dispatch_workflow(GRADE_YML, "", &dispatch_inputs("infradev-1-1"))
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::InvalidInput(_)), "{err}");
    let many: serde_json::Map<String, Value> =
        (0..26).map(|i| (format!("k{i}"), json!("v"))).collect();
    let err = client
        .dispatch_workflow(GRADE_YML, "main", &many)
        .await
        .unwrap_err();
    assert!(matches!(err, GitHubError::InvalidInput(_)), "{err}");
    assert_eq!(fake.requests().len(), before, "nothing was sent");

    // GitHub without `return_run_details` support (204): no id, the caller finds the run.
    fake.fail_next(
        "POST /repos/*/*/actions/workflows/*/dispatches",
        1,
        Failure::Status {
            status: 204,
            message: String::new(),
        },
    );
    let got = client
        .dispatch_workflow(GRADE_YML, "main", &dispatch_inputs("infradev-1-1"))
        .await
        .unwrap();
    assert_eq!(got, None);
    fake.assert_no_violations();
}

#[tokio::test]
async fn the_fake_rejects_dispatches_github_rejects() {
    let (fake, client) = grader_setup().await;
    // Force a token for the raw requests below.
    client.workflow_run(1).await.unwrap_err();
    let token = format!(
        "Bearer {}",
        fake.app()
            .installation_token(INSTALLATION)
            .await
            .unwrap()
            .expose_secret()
    );
    let path = "/repos/acme/grader/actions/workflows/grade.yml/dispatches";
    let post = |body: Value| raw(&fake, reqwest::Method::POST, path, &token, Some(body));

    // Without return_run_details: 204 and a queued run named after the workflow file.
    let r = post(json!({"ref": "main"})).await;
    assert_eq!(r.status(), 204);
    let runs = fake.workflow_runs(GRADER);
    assert_eq!(
        (runs[0].display_title.as_str(), runs[0].status.as_str()),
        (GRADE_YML, "queued")
    );
    fake.assert_no_violations();

    let cases: Vec<(&str, Value, u16, &str)> = vec![
        ("no ref", json!({"inputs": {}}), 422, "required property"),
        ("empty ref", json!({"ref": ""}), 422, "No ref found"),
        (
            "a number input",
            json!({"ref": "main", "inputs": {"pr": 7}}),
            422,
            "is not a string",
        ),
        (
            "26 inputs",
            json!({"ref": "main", "inputs": (0..26).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>()}),
            422,
            "more than 25 properties",
        ),
    ];
    for (name, body, status, violation) in cases {
        let r = post(body).await;
        assert_eq!(r.status().as_u16(), status, "{name}");
        let violations = fake.clear_violations();
        assert!(
            violations.iter().any(|v| v.contains(violation)),
            "{name}: {violations:?}"
        );
    }

    // A workflow that declares its inputs refuses others, as GitHub does.
    fake.add_workflow_with_inputs(GRADER, "strict.yml", &["name"]);
    let r = raw(
        &fake,
        reqwest::Method::POST,
        "/repos/acme/grader/actions/workflows/strict.yml/dispatches",
        &token,
        Some(json!({"ref": "main", "inputs": {"name": "x", "extra": "y"}})),
    )
    .await;
    assert_eq!(r.status(), 422);
    let violations = fake.clear_violations();
    assert!(
        violations[0].contains(r#"Unexpected inputs provided: ["extra"]"#),
        "{violations:?}"
    );
    assert_eq!(fake.workflow_runs(GRADER).len(), 1, "no run for a refusal");
}

/// The `on.workflow_dispatch.inputs` names of a workflow file (its two-space YAML layout).
fn declared_inputs(yaml: &str) -> Vec<String> {
    let mut inputs = Vec::new();
    let mut in_inputs = false;
    for line in yaml.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if in_inputs {
            if indent <= 4 {
                break;
            }
            if indent == 6
                && let Some(name) = text.strip_suffix(':')
            {
                inputs.push(name.to_string());
            }
        } else if indent == 4 && text == "inputs:" {
            in_inputs = true;
        }
    }
    inputs
}

#[tokio::test]
async fn the_example_grading_workflow_accepts_a_grade_dispatch() {
    let path = support::root().join("runners/github-actions/grade.yml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let declared = declared_inputs(&yaml);
    let mut want: Vec<String> = dispatch_inputs("x").keys().cloned().collect();
    want.sort();
    let mut got = declared.clone();
    got.sort();
    assert_eq!(got, want, "{}", path.display());
    assert!(declared.len() <= infradev::service::github::MAX_DISPATCH_INPUTS);
    assert!(yaml.contains("run-name: ${{ inputs.name }}"));
    assert!(yaml.contains("runs-on: ${{ fromJSON(inputs.runs_on) }}"));

    let (fake, client) = grader_setup().await;
    let names: Vec<&str> = declared.iter().map(String::as_str).collect();
    fake.add_workflow_with_inputs(GRADER, GRADE_YML, &names);
    let id = client
        .dispatch_workflow(GRADE_YML, "main", &dispatch_inputs("infradev-42-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fake.workflow_runs(GRADER)[0].id, id);
    fake.assert_no_violations();
}

#[tokio::test]
async fn workflow_webhooks_describe_the_fake_s_runs() {
    use infradev::service::webhook::{Event, parse};
    use support::payloads;

    let (fake, client) = grader_setup().await;
    let id = client
        .dispatch_workflow(GRADE_YML, "main", &dispatch_inputs("infradev-42-1"))
        .await
        .unwrap()
        .unwrap();
    let run = fake.workflow_runs(GRADER)[0].clone();
    let as_event = |event: &str, payload: &Value| {
        let (body, _) = payloads::signed(payload, "s");
        parse(event, &body).unwrap()
    };

    let requested = payloads::workflow_run("requested", INSTALLATION, GRADER, &run);
    assert_eq!(
        as_event("workflow_run", &requested),
        Event::WorkflowRun {
            action: "requested".into(),
            repo: infradev::service::webhook::Repo {
                owner: "acme".into(),
                name: "grader".into(),
            },
            installation_id: Some(INSTALLATION),
            run_id: id,
            status: "queued".into(),
            conclusion: None,
            display_title: "infradev-42-1".into(),
        }
    );
    assert_eq!(requested["workflow_run"]["event"], "workflow_dispatch");
    assert_eq!(requested["repository"]["full_name"], GRADER);

    let waiting = payloads::workflow_job("waiting", INSTALLATION, GRADER, &run, 900, None, None);
    assert_eq!(
        waiting["workflow_job"]["labels"],
        json!(["self-hosted", "gpu", "gpus-4"])
    );
    let taken = payloads::workflow_job(
        "in_progress",
        INSTALLATION,
        GRADER,
        &run,
        900,
        Some("gpu-4-a"),
        None,
    );
    let Event::WorkflowJob {
        run_id,
        job_id,
        status,
        runner_name,
        installation_id,
        ..
    } = as_event("workflow_job", &taken)
    else {
        panic!("a workflow_job event")
    };
    assert_eq!(
        (
            run_id,
            job_id,
            status.as_str(),
            runner_name.as_deref(),
            installation_id
        ),
        (id, 900, "in_progress", Some("gpu-4-a"), Some(INSTALLATION))
    );
    let Event::WorkflowJob { runner_name, .. } = as_event("workflow_job", &waiting) else {
        panic!()
    };
    assert_eq!(runner_name, None);

    let run = fake.set_workflow_run(GRADER, id, "completed", Some("failure"));
    let done = payloads::workflow_job(
        "completed",
        INSTALLATION,
        GRADER,
        &run,
        900,
        Some("gpu-4-a"),
        Some("failure"),
    );
    let event = as_event("workflow_job", &done);
    assert_eq!(event.action(), Some("completed"));
    assert!(matches!(
        &event,
        Event::WorkflowJob { conclusion: Some(c), status, .. } if c == "failure" && status == "completed"
    ));
    let completed = payloads::workflow_run("completed", INSTALLATION, GRADER, &run);
    let Event::WorkflowRun {
        status, conclusion, ..
    } = as_event("workflow_run", &completed)
    else {
        panic!()
    };
    assert_eq!(
        (status.as_str(), conclusion.as_deref()),
        ("completed", Some("failure"))
    );
    fake.assert_no_violations();
}
