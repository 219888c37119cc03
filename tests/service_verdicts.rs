//! What a pull request's `InfraDev` check and sticky comment show is the grade of what the
//! pull request is, told as stories (same world as tests/service.rs: real HTTP, HMAC, JWT,
//! store on SQLite and PostgreSQL, git and Docker; only github.com is faked, and the fake
//! checks every request against GitHub's OpenAPI description).
//!
//! GitHub keeps check runs per commit, not per pull request, and a branch protection rule
//! reads the newest run of a name on the commit: a neutral run posted for one pull request
//! can hide another's `failure`. A grade whose pull request moved on (another head, another
//! task) must never be posted; neither may anything be posted once the App lost access; and
//! what is posted says nothing about the grader's internals.

mod support;

use support::payloads::Author;
use support::story::*;

macro_rules! stories {
    ($($name:ident),* $(,)?) => {
        mod sqlite { $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Backend::Sqlite).await } )* }
        mod postgres { $(#[tokio::test(flavor = "multi_thread")] async fn $name() { super::$name(super::Backend::Postgres).await } )* }
    };
}

stories!(an_unfetchable_head_is_reported_in_fixed_words,);

async fn an_unfetchable_head_is_reported_in_fixed_words(backend: Backend) {
    let Some(mut w) = World::new(backend).await else {
        return;
    };
    w.start().await;
    // A head the fork does not have (deleted by a force-push before we fetched it).
    let head = "0123456789abcdef0123456789abcdef01234567";
    w.seed_agent_pull(95, head);
    w.send(
        "pull_request",
        w.pull_event("opened.json", 95, head, Author::Agent),
    )
    .await;
    let run = w.completed_job_runs(head, 1).await.remove(0);
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    let check = format!("{:?}\n{:?}\n{:?}", run.title, run.summary, run.text);
    assert!(check.contains("could not be fetched"), "{check}");
    let comment = w
        .wait("the comment", || w.sticky_comments(95).into_iter().next())
        .await;
    let job = w.jobs(95).await.remove(0);
    let page = w
        .http
        .get(w.url(&format!("/grades/{}", job.id.0)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // Operators have git's words (the store, the operator's grade page) ...
    let error = job.error.clone().unwrap_or_default();
    let work = w.dir.path().display().to_string();
    assert!(error.contains(&work), "{error}");
    // ... the public has fixed phrases: no path of the grader, no internal URL, no git.
    for (what, text) in [
        ("check run", &check),
        ("comment", &comment.body),
        ("public grade page", &page),
    ] {
        for internal in [work.as_str(), "file://", "fatal", "upload-pack"] {
            assert!(
                !text.contains(internal),
                "the {what} shows {internal:?}:\n{text}"
            );
        }
    }
    w.assert_clean();
}
