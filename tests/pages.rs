//! The grade pages, the dashboard and `infradev stats --store`, told as one story on real
//! grades: the service grades three agent PRs of the example task (Docker), links each check
//! run to its grade page, serves the public and the operator views, the downloads and the
//! dashboard, and a real headless Chromium (Debian's `chromium`) loads them: what it renders
//! is asserted, and its screenshots are the ones docs/github-app.md shows.
//! Then `infradev stats --store` summarises the same grades from SQLite and, copied, from
//! PostgreSQL.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use infradev::grade::report::Report;
use infradev::service::store::{PullUpsert, Store};
use support::payloads::{Author, FORK_OWNER};
use support::story::*;

const TOKEN: &str = "operator-token-for-the-story-0123";
/// A directory the hostile submission adds a `conftest.py` under: its path is shown on the
/// public page (a neutralised file) and the operator page (a changed file), as text.
const HOSTILE: &str = "x\"><img src=x onerror=alert(1)><script>alert(2)<";
const WIDTH: u32 = 1280;
const HEIGHT: u32 = 2200;

/// Debian's Chromium, or `None` (loudly; a failure under CI=true, where runners/test.sh
/// installs it).
fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser"] {
        if Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(PathBuf::from(name));
        }
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and chromium is not installed (runners/test.sh installs it: apt-get install chromium)"
    );
    eprintln!("NOT RUN in a browser: chromium is not installed (apt-get install chromium)");
    None
}

/// Loads `url` in headless Chromium with a profile of its own; `--dump-dom` output, or a
/// screenshot written to `png`.
fn browse(chromium: &Path, url: &str, png: Option<&Path>) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        "--force-device-scale-factor=1",
        "--virtual-time-budget=10000",
        &format!("--window-size={WIDTH},{HEIGHT}"),
        &format!("--user-data-dir={}", profile.path().display()),
    ]);
    match png {
        Some(path) => cmd.arg(format!("--screenshot={}", path.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out = cmd.arg(url).output().expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A page on another port that logs the browser in (the login form, submitted at once) and
/// goes on to `next`: Chromium has no flag for a request header, so it logs in as a person
/// would, and keeps the cookie for the redirect.
async fn login_page(service: &str, next: &str) -> String {
    let html = format!(
        "<!DOCTYPE html><html><body><form method=\"post\" action=\"{service}/login\">\
         <input name=\"token\" value=\"{TOKEN}\"><input name=\"next\" value=\"{next}\"></form>\
         <script>document.forms[0].submit()</script></body></html>"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { axum::response::Html(html) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

fn assert_screenshot(path: &Path, blank: usize) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(png_size(&bytes), (WIDTH, HEIGHT), "{}", path.display());
    // A blank page of this size compresses to a few kilobytes; text, tables and charts do not.
    assert!(
        bytes.len() > blank * 4,
        "{} looks blank: {} bytes (a blank page: {blank})",
        path.display(),
        bytes.len()
    );
}

fn stats(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("stats")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn get(w: &World, path: &str, auth: Option<&str>) -> reqwest::Response {
    let mut req = w.http.get(w.url(path));
    if let Some(token) = auth {
        req = req.bearer_auth(token);
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn grade_pages_the_dashboard_and_stats_from_the_store() {
    let Some(mut w) = World::new(Backend::Sqlite).await else {
        return;
    };
    let token_file = w.dir.path().join("operator-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}");
    w.listen = format!("127.0.0.1:{port}");
    w.extra_config = format!(
        "[web]\npublic_url = \"{public_url}/\"\noperator_token_file = \"{}\"\n",
        token_file.display()
    );
    w.start().await;

    // Three agent PRs: a wrong change (official tests pass, probes reject it), the reference
    // change, and the broken change plus a conftest.py in a directory named like markup.
    let hostile = hostile_head(&w.heads.broken);
    w.seed_agent_pull(2, &w.heads.wrong);
    w.seed_agent_pull(3, &w.heads.reference);
    w.seed_agent_pull(4, &hostile);
    let heads = [
        (2, w.heads.wrong.clone()),
        (3, w.heads.reference.clone()),
        (4, hostile.clone()),
    ];
    for (number, head) in &heads {
        let event = w.pull_event("opened.json", *number, head, Author::Agent);
        assert_eq!(w.send("pull_request", event).await, 202);
    }
    let mut ids = Vec::new();
    for (_, head) in &heads {
        let run = w.completed_job_runs(head, 1).await.remove(0);
        let id = run.external_id.clone().unwrap();
        assert_eq!(
            run.details_url.as_deref(),
            Some(format!("{public_url}/grades/{id}").as_str()),
            "the check run links to its grade page"
        );
        ids.push(id.parse::<i64>().unwrap());
    }
    let (wrong, reference, broken) = (ids[0], ids[1], ids[2]);
    let store = w.store().await;
    let stored = |id: i64| {
        let store = store.clone();
        async move {
            let job = store
                .graded_job(infradev::service::store::JobId(id))
                .await
                .unwrap()
                .unwrap();
            assert!(job.finished_at.is_some(), "finished_at is recorded");
            let report: Report = serde_json::from_str(job.job.result_json.as_deref().unwrap())
                .expect("the stored report");
            (job, report)
        }
    };
    let (wrong_job, wrong_report) = stored(wrong).await;
    assert_eq!(
        wrong_job.author,
        Some(format!("{FORK_OWNER}[bot]")),
        "the agent account"
    );
    assert!(
        !wrong_report.images.is_empty() && wrong_report.images[0].id.starts_with("sha256:"),
        "a Docker grade records its images by digest: {:?}",
        wrong_report.images
    );
    let (_, broken_report) = stored(broken).await;
    let hostile_path = format!("{HOSTILE}/conftest.py");
    assert!(
        broken_report.flags.iter().any(|f| f.path == hostile_path),
        "the guard neutralised {hostile_path}: {:?}",
        broken_report.flags
    );

    // The public page: what the check run shows.
    let response = get(&w, &format!("/grades/{wrong}"), None).await;
    assert_eq!(response.status(), 200);
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let public = response.text().await.unwrap();
    assert!(public.contains("verdict unresolved"), "{public}");
    let failing: Vec<&str> = wrong_report
        .grade
        .tests
        .iter()
        .filter(|t| t.category.is_some())
        .map(|t| t.evidence.id.as_str())
        .collect();
    let passing_probes: Vec<&str> = wrong_report
        .grade
        .tests
        .iter()
        .filter(|t| t.passed() && !t.expectation.is_official())
        .map(|t| t.evidence.id.as_str())
        .collect();
    assert!(!failing.is_empty() && !passing_probes.is_empty());
    for id in &failing {
        assert!(
            public.contains(&html_escape(id)),
            "public page lacks failing {id}"
        );
    }
    let operator_only = passing_probes
        .iter()
        .map(|s| html_escape(s))
        .chain([
            wrong_report.images[0].id.clone(),
            // The reproduce command names the grader's root, so it works from the clone.
            format!("infradev --root {} grade --task", support::root().display()),
            format!("/grades/{wrong}/report.json"),
        ])
        .collect::<Vec<_>>();
    for hidden in &operator_only {
        assert!(
            !public.contains(hidden.as_str()),
            "the public page shows {hidden}"
        );
    }
    // With the operator token: everything.
    let full = get(&w, &format!("/grades/{wrong}"), Some(TOKEN))
        .await
        .text()
        .await
        .unwrap();
    for shown in &operator_only {
        assert!(
            full.contains(shown.as_str()),
            "the operator page lacks {shown}"
        );
    }
    assert!(
        full.contains(&format!("/grades/{wrong}\">{wrong}</a> (this)")),
        "history"
    );
    // Downloads: operators only; the JSON is the stored report.
    for file in ["report.json", "junit.xml"] {
        let path = format!("/grades/{wrong}/{file}");
        assert_eq!(get(&w, &path, None).await.status(), 401, "{path}");
        assert_eq!(
            get(&w, &path, Some("not-the-token-000000")).await.status(),
            401
        );
    }
    let json: Report = get(&w, &format!("/grades/{wrong}/report.json"), Some(TOKEN))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(json, wrong_report);
    let junit = get(&w, &format!("/grades/{wrong}/junit.xml"), Some(TOKEN))
        .await
        .text()
        .await
        .unwrap();
    assert!(junit.contains("<testsuites"), "{junit}");
    assert_eq!(get(&w, "/grades/999999", None).await.status(), 404);

    // The dashboard: operators only, by token or by the login form's cookie.
    assert_eq!(get(&w, "/dashboard", None).await.status(), 401);
    let refused = w
        .http
        .post(w.url("/login"))
        .form(&[("token", "wrong-token-0000000000"), ("next", "/dashboard")])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = no_redirects
        .post(w.url("/login"))
        .form(&[("token", TOKEN), ("next", "https://evil.example/")])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 303);
    assert_eq!(
        login.headers()["location"],
        "/dashboard",
        "never another site"
    );
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && !cookie.contains(TOKEN),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();
    let dashboard = no_redirects
        .get(w.url("/dashboard"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(dashboard.status(), 200);
    let dashboard = dashboard.text().await.unwrap();
    let headline = "Resolved 1 of 3 graded (33.3 %). Passed every official test but rejected by \
                    probes: 1 of 2 (50.0 %). Infra errors, not counted: 0.";
    assert!(dashboard.contains(headline), "{dashboard}");

    // `infradev stats --store`: the same figures, from the same aggregation.
    let (code, json, err) = stats(&["--store", &w.store_url, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let sqlite_stats: serde_json::Value = serde_json::from_str(&json).unwrap();
    let overall = &sqlite_stats["overall"];
    assert_eq!(
        (
            &overall["graded"],
            &overall["resolved"],
            &overall["official_passed"],
            &overall["rejected_by_probes"]
        ),
        (&3.into(), &1.into(), &2.into(), &1.into()),
        "{json}"
    );
    let (code, text, _) = stats(&["--store", &w.store_url]);
    assert_eq!(code, 0);
    assert!(
        text.starts_with("resolved 1 of 3 graded (33.3 %)"),
        "{text}"
    );
    let (code, csv, _) = stats(&[
        "--store",
        &w.store_url,
        "--format",
        "csv",
        "--table",
        "repositories",
    ]);
    assert_eq!(code, 0);
    assert!(csv.lines().nth(1).unwrap().starts_with(REPO_FULL), "{csv}");
    let (code, _, err) = stats(&["--store", "sqlite:///nonexistent/dir/x.db"]);
    assert_eq!(code, 3, "an unreadable store is ours: {err}");

    // `infradev skill export` reads the same store through the same source, and records
    // exactly which grades it was built from.
    let skills = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(support::root())
        .args(["skill", "export", "--store", &w.store_url, "--out"])
        .arg(skills.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let provenance =
        std::fs::read_to_string(skills.path().join("infra-pr-testing/provenance.json")).unwrap();
    let provenance: serde_json::Value = serde_json::from_str(&provenance).unwrap();
    let inputs = &provenance["inputs"];
    assert_eq!(inputs["kind"], "store", "{provenance}");
    assert_eq!(inputs["store"], w.store_url.as_str());
    let ids: Vec<i64> = inputs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    let mut want = vec![wrong, reference, broken];
    want.sort();
    assert_eq!(ids, want, "{provenance}");

    // The same grades in PostgreSQL give the same tables.
    if let Some(pg) = postgres_database() {
        copy_grades(&store, &pg, &[wrong, reference, broken]).await;
        let (code, json, err) = stats(&["--store", &pg, "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let pg_stats: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(pg_stats, sqlite_stats);
    }

    // A real browser.
    let Some(chromium) = chromium() else {
        return;
    };
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let blank_png = shots.join("blank.png");
    browse(&chromium, "about:blank", Some(&blank_png));
    let blank = std::fs::read(&blank_png).unwrap().len();

    // The hostile submission's grade page, as anyone sees it: the path is text, nothing ran.
    let public = get(&w, &format!("/grades/{broken}"), None)
        .await
        .text()
        .await
        .unwrap();
    assert!(public.contains(&html_escape(&hostile_path)), "{public}");
    let dom = browse(&chromium, &w.url(&format!("/grades/{broken}")), None);
    assert!(dom.contains("verdict unresolved"), "{dom}");
    assert!(
        dom.contains(
            "x\"&gt;&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;alert(2)&lt;/conftest.py"
        ),
        "{dom}"
    );
    assert!(!dom.contains("<img") && !dom.contains("<script"), "{dom}");

    // The operator's grade page and the dashboard, logged in through the form.
    let to_grade = login_page(&public_url, &format!("/grades/{wrong}")).await;
    let dom = browse(&chromium, &to_grade, None);
    assert!(dom.contains("Every test and probe"), "logged in: {dom}");
    for probe in &passing_probes {
        assert!(dom.contains(&html_escape(probe)), "{probe} in {dom}");
    }
    browse(&chromium, &to_grade, Some(&shots.join("grade-page.png")));
    assert_screenshot(&shots.join("grade-page.png"), blank);

    let to_dashboard = login_page(&public_url, "/dashboard").await;
    let dom = browse(&chromium, &to_dashboard, None);
    assert!(
        dom.contains(headline),
        "the dashboard in the browser: {dom}"
    );
    assert_eq!(dom.matches("<svg").count(), 6, "six charts: {dom}");
    assert!(dom.contains("aria-label=\"resolved rate per repository over time\""));
    assert!(!dom.contains("<img"), "{dom}");
    browse(&chromium, &to_dashboard, Some(&shots.join("dashboard.png")));
    assert_screenshot(&shots.join("dashboard.png"), blank);
    eprintln!("screenshots in {}", shots.display());
    store.close().await;
    w.assert_clean();
}

/// A commit on top of `base` in the example repository that adds `<HOSTILE>/conftest.py`.
fn hostile_head(base: &str) -> String {
    let repo = support::example_repo();
    let git = |args: &[&str]| support::git(repo, args);
    git(&["checkout", "-q", "--detach", base]);
    let dir = repo.join(HOSTILE);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("conftest.py"), "import os\n").unwrap();
    git(&["add", "--all"]);
    git(&["commit", "-q", "-m", "add a conftest"]);
    git(&["rev-parse", "HEAD"])
}

/// How the pages write text (`&`, `<`, `>`, quotes escaped).
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// Copies finished jobs (their pull request, the job and its stored report) into the store at
/// `url`, through the store's own operations.
async fn copy_grades(from: &Store, url: &str, ids: &[i64]) {
    let to = Store::open(url).await.unwrap();
    for id in ids {
        let job = from
            .graded_job(infradev::service::store::JobId(*id))
            .await
            .unwrap()
            .unwrap();
        let pull = from
            .get_pull(&job.job.repo, job.job.number)
            .await
            .unwrap()
            .unwrap();
        to.upsert_pull(&PullUpsert {
            repo: pull.repo.clone(),
            number: pull.number,
            head_sha: job.job.head_sha.clone(),
            base_ref: pull.base_ref.clone(),
            task_id: pull.task_id.clone(),
            is_agent: pull.is_agent,
            author: pull.author.clone(),
            installation_id: pull.installation_id,
            draft: false,
            open: true,
        })
        .await
        .unwrap();
        let new = to
            .enqueue_job(
                &job.job.repo,
                job.job.number,
                &job.job.head_sha,
                &job.job.task_id,
                job.job.installation_id,
            )
            .await
            .unwrap()
            .job;
        let claimed = to
            .claim_job("copy", std::time::Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claimed.id, new.id);
        assert!(
            to.finish_job(
                new.id,
                "copy",
                job.job.verdict.as_deref().unwrap(),
                job.job.result_json.as_deref().unwrap()
            )
            .await
            .unwrap()
        );
    }
    to.close().await;
}
