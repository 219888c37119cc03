//! Webhook intake without I/O beyond reading fixtures: signature vectors, every fixture payload
//! parsed into an `Event` (insta snapshots), parse errors, and fixture → decision end to end.

use std::path::{Path, PathBuf};

use infradev::service::app::decide::{self, Decision, GradeReason, Known, PullState, Settings};
use infradev::service::app::matching::AgentPolicy;
use infradev::service::webhook::{Event, ParseError, PrAction, parse, sign, verify_signature};
use secrecy::SecretString;
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/github");

fn fixture(rel: &str) -> Vec<u8> {
    let path = Path::new(FIXTURES).join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn secrets(list: &[&str]) -> Vec<SecretString> {
    list.iter().map(|s| SecretString::from(*s)).collect()
}

// ---------------------------------------------------------------------------------------------
// Signatures: every vector of tests/fixtures/github/signatures.md, plus vector B from
// octokit/webhooks-methods.js (secret `mysecret`, a 2-space JSON body with a final `\n`).

const DOC_SECRET: &str = "It's a Secret to Everybody";
const DOC_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
const FIXTURE_SECRET: &str = "fixture-webhook-secret-2f9c1a";

/// Name, secrets, header, body, whether it verifies.
type SignatureCase<'a> = (&'a str, Vec<&'a str>, Option<String>, &'a [u8], bool);

fn h(s: impl Into<String>) -> Option<String> {
    Some(s.into())
}

#[test]
fn signature_vectors() {
    let doc_body = b"Hello, World!".as_slice();
    let unicode_body = r#"{"comment":{"body":"héllo wörld 👋"}}"#.as_bytes();
    let unicode_sig = "sha256=52a159619710d1de373d865525765d717ad10ef7f8259f58d860ee56a1169100";
    let wrong_secret_sig =
        "sha256=05e4c326f226561bdf576ba97951abbea2822d8e8df641580a291e11a58df3f5";
    let b_body = b"{\n  \"foo\": \"bar\"\n}\n".as_slice();
    let b_sig = "sha256=e3eccac34c43c7dc1cbb905488b1b81347fcc700a7b025697a9d07862256023f";

    let cases: Vec<SignatureCase> = vec![
        (
            "documented vector",
            vec![DOC_SECRET],
            h(DOC_SIG),
            doc_body,
            true,
        ),
        (
            "documented vector, upper-case hex",
            vec![DOC_SECRET],
            h(DOC_SIG.to_uppercase().replace("SHA256=", "sha256=")),
            doc_body,
            true,
        ),
        (
            "wrong secret (lower case)",
            vec!["it's a secret to everybody"],
            h(DOC_SIG),
            doc_body,
            false,
        ),
        (
            "the wrong secret's own signature",
            vec!["it's a secret to everybody"],
            h(wrong_secret_sig),
            doc_body,
            true,
        ),
        (
            "wrong secret's signature under the right secret",
            vec![DOC_SECRET],
            h(wrong_secret_sig),
            doc_body,
            false,
        ),
        (
            "body with a trailing newline",
            vec![DOC_SECRET],
            h(DOC_SIG),
            b"Hello, World!\n",
            false,
        ),
        (
            "non-ASCII secret and body",
            vec!["sécret-🔑"],
            h(unicode_sig),
            unicode_body,
            true,
        ),
        (
            "non-ASCII, secret without the emoji",
            vec!["sécret-"],
            h(unicode_sig),
            unicode_body,
            false,
        ),
        (
            "vector B (webhooks-methods.js)",
            vec!["mysecret"],
            h(b_sig),
            b_body,
            true,
        ),
        (
            "vector B, body without final newline",
            vec!["mysecret"],
            h(b_sig),
            &b_body[..b_body.len() - 1],
            false,
        ),
        (
            "rotation: new secret first",
            vec!["new-secret", DOC_SECRET],
            h(DOC_SIG),
            doc_body,
            true,
        ),
        (
            "rotation: old secret first",
            vec![DOC_SECRET, "new-secret"],
            h(DOC_SIG),
            doc_body,
            true,
        ),
        (
            "rotation: neither",
            vec!["a", "b"],
            h(DOC_SIG),
            doc_body,
            false,
        ),
        ("no secrets", vec![], h(DOC_SIG), doc_body, false),
        (
            "empty secret is never used",
            vec![""],
            h("sha256=2bbcfa9524f3218c7a34b30e6936f8b1a4516cb097f1a85a1c7d98b5977ec769"),
            doc_body,
            false,
        ),
        ("missing header", vec![DOC_SECRET], None, doc_body, false),
        ("empty header", vec![DOC_SECRET], h(""), doc_body, false),
        (
            "sha1 scheme",
            vec![DOC_SECRET],
            h("sha1=757107ea0eb2509fc211221cce984b8a37570b6d"),
            doc_body,
            false,
        ),
        (
            "sha1 scheme with the sha256 digest",
            vec![DOC_SECRET],
            h(DOC_SIG.replace("sha256=", "sha1=")),
            doc_body,
            false,
        ),
        (
            "bare hex",
            vec![DOC_SECRET],
            h(&DOC_SIG[7..]),
            doc_body,
            false,
        ),
        (
            "upper-case scheme",
            vec![DOC_SECRET],
            h(DOC_SIG.replace("sha256=", "SHA256=")),
            doc_body,
            false,
        ),
        (
            "sha256=xxx…",
            vec![DOC_SECRET],
            h(format!("sha256={}", "x".repeat(64))),
            doc_body,
            false,
        ),
        ("`foo`", vec![DOC_SECRET], h("foo"), doc_body, false),
        (
            "truncated digest",
            vec![DOC_SECRET],
            h(&DOC_SIG[..DOC_SIG.len() - 2]),
            doc_body,
            false,
        ),
        (
            "digest with an extra byte",
            vec![DOC_SECRET],
            h(format!("{DOC_SIG}00")),
            doc_body,
            false,
        ),
        (
            "odd hex length",
            vec![DOC_SECRET],
            h(&DOC_SIG[..DOC_SIG.len() - 1]),
            doc_body,
            false,
        ),
        (
            "space before the digest",
            vec![DOC_SECRET],
            h(DOC_SIG.replace('=', "= ")),
            doc_body,
            false,
        ),
        (
            "trailing space",
            vec![DOC_SECRET],
            h(format!("{DOC_SIG} ")),
            doc_body,
            false,
        ),
        (
            "one digit changed",
            vec![DOC_SECRET],
            h(DOC_SIG.replace("757107", "757108")),
            doc_body,
            false,
        ),
    ];
    for (name, list, header, body, want) in cases {
        assert_eq!(
            verify_signature(&secrets(&list), header.as_deref(), body),
            want,
            "{name}"
        );
    }
}

#[test]
fn signature_vectors_over_fixture_files() {
    // signatures.md §2: the whole file, and the file minus its final `\n` (which must not
    // verify against the whole file's signature, and vice versa).
    let table = [
        (
            "webhooks/pull_request/opened.json",
            28011,
            "sha256=c35706f0ea28f1ad75dbbe447aafeece05f6bbbdf85f011e9cff224bd795dded",
            "sha256=f7424d1b12b02dbcf1a1955dd4b0028d6b53c7c992b75aeecac3364b13f61434",
        ),
        (
            "webhooks/issue_comment/created.with-installation.json",
            16303,
            "sha256=a5ad0cdb9baa5895322d301c9271f3a477d29330c499fa9ab56d8d5b1ebeeed3",
            "sha256=fcf2f8df341eaa882863e26f5e762c3ae20f87fb17119ad9bcc785c3637c43d9",
        ),
        (
            "webhooks/check_run/rerequested.json",
            11427,
            "sha256=3f55a038059e5ea70ffc6c584aa6a9ff61a845d765b4374062b375ccab5329a6",
            "sha256=a8fb0126e99c6c93a63d75fa8e16e07ab90ad428bd1c245d974b8022f8fd1a6c",
        ),
        (
            "webhooks/ping/ping.with-app_id.json",
            7654,
            "sha256=04d808a768451b52d5840be0ac65aeae7bcc75d0ed99fd0509f79dfbec5d7bb6",
            "sha256=f8f5663be101f5acca0e515a3a6faa209ea173606721da0252b4e7bc4250224f",
        ),
    ];
    let secret = secrets(&[FIXTURE_SECRET]);
    for (file, len, whole, trimmed) in table {
        let body = fixture(file);
        assert_eq!(body.len(), len, "{file}");
        assert_eq!(body.last(), Some(&b'\n'), "{file}");
        let cut = &body[..body.len() - 1];
        assert!(
            verify_signature(&secret, Some(whole), &body),
            "{file}: whole file"
        );
        assert!(
            verify_signature(&secret, Some(trimmed), cut),
            "{file}: minus final newline"
        );
        assert!(
            !verify_signature(&secret, Some(trimmed), &body),
            "{file}: trimmed signature on the whole file"
        );
        assert!(
            !verify_signature(&secret, Some(whole), cut),
            "{file}: whole signature on the trimmed body"
        );
        assert!(
            !verify_signature(&secrets(&["other"]), Some(whole), &body),
            "{file}: wrong secret"
        );
        assert_eq!(sign(&secret[0], &body), whole, "{file}: sign");
        assert_eq!(sign(&secret[0], cut), trimmed, "{file}: sign trimmed");
    }
}

#[test]
fn empty_secrets_are_skipped_not_hashed() {
    let empty = SecretString::from("");
    let sig = sign(&empty, b"Hello, World!");
    assert_eq!(
        sig,
        "sha256=2bbcfa9524f3218c7a34b30e6936f8b1a4516cb097f1a85a1c7d98b5977ec769"
    );
    assert!(!verify_signature(&[empty], Some(&sig), b"Hello, World!"));
}

#[test]
fn sign_matches_the_documented_vector() {
    let secret = SecretString::from(DOC_SECRET);
    assert_eq!(sign(&secret, b"Hello, World!"), DOC_SIG);
    let body = br#"{"zen":"Keep it logically awesome."}"#;
    assert!(verify_signature(
        std::slice::from_ref(&secret),
        Some(&sign(&secret, body)),
        body
    ));
}

// ---------------------------------------------------------------------------------------------
// Parsing: every fixture file, whatever its event, has a snapshot of what it parses to.

/// Every `webhooks/<event>/*.json` file, sorted, with its event name.
fn fixture_files() -> Vec<(String, PathBuf)> {
    let root = Path::new(FIXTURES).join("webhooks");
    let mut files = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display())) {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let event = dir.file_name().unwrap().to_str().unwrap().to_owned();
        for file in std::fs::read_dir(&dir).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|e| e == "json") {
                files.push((event.clone(), file));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_fixture_parses_to_its_snapshot() {
    let files = fixture_files();
    assert!(
        files.len() >= 58,
        "expected the 58 fixture files, found {}",
        files.len()
    );
    for (event, path) in files {
        let stem = path
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .replace('.', "-");
        let body = std::fs::read(&path).unwrap();
        let parsed = parse(&event, &body).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // What the snapshot cannot show: the event name survives, and the handled actions are
        // not ignored.
        assert_eq!(parsed.name(), event, "{}", path.display());
        insta::assert_debug_snapshot!(format!("fixture__{event}__{stem}"), parsed);
    }
}

#[test]
fn handled_actions_are_not_ignored() {
    let handled = [
        "pull_request/opened",
        "pull_request/synchronize",
        "pull_request/reopened",
        "pull_request/ready_for_review",
        "pull_request/closed",
        "pull_request/labeled",
        "pull_request/converted_to_draft",
        "check_run/rerequested",
        "check_run/requested_action",
        "check_suite/requested",
        "check_suite/rerequested",
        "issue_comment/created",
        "installation/created",
        "installation/deleted",
        "installation_repositories/added",
        "installation_repositories/removed",
        "ping/ping",
        "workflow_run/requested",
        "workflow_run/completed",
        "workflow_job/queued",
        "workflow_job/waiting",
        "workflow_job/in_progress",
        "workflow_job/completed",
    ];
    for (event, path) in fixture_files() {
        let action = path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap()
            .to_owned();
        let parsed = parse(&event, &std::fs::read(&path).unwrap()).unwrap();
        let is_handled = handled.contains(&format!("{event}/{action}").as_str());
        assert_eq!(
            !matches!(parsed, Event::Ignored { .. }),
            is_handled,
            "{}",
            path.display()
        );
        if !is_handled {
            assert_eq!(
                parsed,
                Event::Ignored {
                    event: event.clone(),
                    action: (event != "workflow_dispatch").then_some(action)
                }
            );
        }
    }
}

/// A fixture as JSON, changed by `edit`, back to bytes.
fn edited(rel: &str, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(&fixture(rel)).unwrap();
    edit(&mut value);
    serde_json::to_vec_pretty(&value).unwrap()
}

#[test]
fn synthesized_variants() {
    // A comment on a pull request (no fixture has one).
    let body = edited(
        "webhooks/issue_comment/created.with-installation.json",
        |v| {
            v["issue"]["pull_request"] =
                json!({"url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1"});
            v["comment"]["body"] = json!("/infradev grade\r\n");
        },
    );
    let Event::IssueComment {
        is_pull_request,
        body,
        installation_id,
        ..
    } = parse("issue_comment", &body).unwrap()
    else {
        panic!()
    };
    assert!(is_pull_request);
    assert_eq!(
        (body.as_str(), installation_id),
        ("/infradev grade\r\n", Some(1))
    );

    // A fork PR from a bot, a draft, into a task branch, with an empty external state.
    let body = edited("webhooks/pull_request/opened.json", |v| {
        let pr = &mut v["pull_request"];
        pr["head"]["repo"]["full_name"] = json!("agent-fork/Hello-World");
        pr["head"]["repo"]["clone_url"] = json!("https://github.com/agent-fork/Hello-World.git");
        pr["base"]["ref"] = json!("infradev/t1");
        pr["draft"] = json!(true);
        pr["user"]["login"] = json!("coder[bot]");
        pr["user"]["type"] = json!("Bot");
        pr["body"] = Value::Null;
    });
    let Event::PullRequest {
        action, repo, pr, ..
    } = parse("pull_request", &body).unwrap()
    else {
        panic!()
    };
    assert_eq!(action, PrAction::Opened);
    assert!(pr.is_fork_of(&repo) && pr.draft && pr.author_is_bot && pr.body.is_none());
    assert_eq!(pr.base_ref, "infradev/t1");
    assert_eq!(
        pr.head_clone_url.as_deref(),
        Some("https://github.com/agent-fork/Hello-World.git")
    );

    // The head repository was deleted; `draft` missing (old payloads).
    let body = edited("webhooks/pull_request/synchronize.json", |v| {
        v["pull_request"]["head"]["repo"] = Value::Null;
        v["pull_request"].as_object_mut().unwrap().remove("draft");
    });
    let Event::PullRequest { repo, pr, .. } = parse("pull_request", &body).unwrap() else {
        panic!()
    };
    assert_eq!(
        (pr.head_repo_full_name, pr.head_clone_url, pr.draft),
        (None, None, false)
    );
    assert_eq!(repo.full_name(), "Codertocat/Hello-World");

    // A check run listing a PR of another repository that shares the head: not ours.
    let body = edited("webhooks/check_run/requested_action.json", |v| {
        let mut other = v["check_run"]["pull_requests"][0].clone();
        other["number"] = json!(5);
        other["base"]["repo"]["id"] = json!(1);
        v["check_run"]["pull_requests"]
            .as_array_mut()
            .unwrap()
            .push(other);
        v["check_run"]["external_id"] = json!("job-42");
        v["requested_action"]["identifier"] = json!("regrade");
    });
    let parsed = parse("check_run", &body).unwrap();
    let Event::CheckRunRequestedAction {
        pull_numbers,
        external_id,
        identifier,
        ..
    } = &parsed
    else {
        panic!()
    };
    assert_eq!(
        (
            pull_numbers.as_slice(),
            external_id.as_deref(),
            identifier.as_str()
        ),
        (&[26764][..], Some("job-42"), "regrade")
    );
    assert_eq!(parsed.action(), Some("requested_action"));

    // A workflow run in a state no fixture shows, under an App installation.
    let body = edited("webhooks/workflow_run/requested.json", |v| {
        v["action"] = json!("in_progress");
        v["workflow_run"]["status"] = json!("in_progress");
        v["workflow_run"]["display_title"] = json!("infradev-42-1");
        v["installation"] = json!({"id": 77});
    });
    let parsed = parse("workflow_run", &body).unwrap();
    assert_eq!(
        parsed,
        Event::WorkflowRun {
            action: "in_progress".into(),
            repo: infradev::service::webhook::Repo {
                owner: "octo-org".into(),
                name: "octo-repo".into(),
            },
            installation_id: Some(77),
            run_id: 289782451,
            status: "in_progress".into(),
            conclusion: None,
            display_title: "infradev-42-1".into(),
        }
    );
    assert_eq!(parsed.action(), Some("in_progress"));
    assert_eq!(parsed.installation_id(), Some(77));
    assert_eq!(
        parsed.repo().map(|r| r.full_name()).as_deref(),
        Some("octo-org/octo-repo")
    );

    // A job no runner took yet, with an empty runner name; and one without the field at all.
    for edit in [
        (|v: &mut Value| v["workflow_job"]["runner_name"] = json!("")) as fn(&mut Value),
        |v: &mut Value| {
            v["workflow_job"]
                .as_object_mut()
                .unwrap()
                .remove("runner_name");
        },
    ] {
        let body = edited("webhooks/workflow_job/queued.json", edit);
        let Event::WorkflowJob {
            runner_name,
            run_id,
            job_id,
            ..
        } = parse("workflow_job", &body).unwrap()
        else {
            panic!()
        };
        assert_eq!((runner_name, run_id, job_id), (None, 2202229078, 289782451));
    }

    // Unknown events and actions are ignored whatever their shape.
    for (event, body, want) in [
        (
            "push",
            r#"{"ref":"refs/heads/main"}"#,
            Event::Ignored {
                event: "push".into(),
                action: None,
            },
        ),
        (
            "push",
            r#"{"action":42}"#,
            Event::Ignored {
                event: "push".into(),
                action: None,
            },
        ),
        (
            "star",
            r#"{"action":"created"}"#,
            Event::Ignored {
                event: "star".into(),
                action: Some("created".into()),
            },
        ),
        (
            "pull_request",
            r#"{"action":"assigned"}"#,
            Event::Ignored {
                event: "pull_request".into(),
                action: Some("assigned".into()),
            },
        ),
        (
            "pull_request",
            r#"{"action":"brand_new_action","pull_request":7}"#,
            Event::Ignored {
                event: "pull_request".into(),
                action: Some("brand_new_action".into()),
            },
        ),
        (
            "check_run",
            r#"{"action":"completed"}"#,
            Event::Ignored {
                event: "check_run".into(),
                action: Some("completed".into()),
            },
        ),
        (
            "check_suite",
            r#"{"action":"completed"}"#,
            Event::Ignored {
                event: "check_suite".into(),
                action: Some("completed".into()),
            },
        ),
        (
            "issue_comment",
            r#"{"action":"deleted"}"#,
            Event::Ignored {
                event: "issue_comment".into(),
                action: Some("deleted".into()),
            },
        ),
        ("ping", r#"{}"#, Event::Ping),
        (
            "",
            r#"{}"#,
            Event::Ignored {
                event: "".into(),
                action: None,
            },
        ),
    ] {
        assert_eq!(parse(event, body.as_bytes()), Ok(want), "{event} {body}");
    }
}

#[test]
fn parse_errors_name_the_path() {
    let opened = fixture("webhooks/pull_request/opened.json");
    let set = |rel: &str, pointer: &str, value: Value| {
        edited(rel, |v| {
            *v.pointer_mut(pointer)
                .unwrap_or_else(|| panic!("{pointer}")) = value
        })
    };
    let remove = |rel: &str, parent: &str, key: &str| {
        edited(rel, |v| {
            v.pointer_mut(parent)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove(key);
        })
    };
    let cases: Vec<(&str, &str, Vec<u8>, Option<&str>)> = vec![
        (
            "truncated",
            "pull_request",
            opened[..opened.len() / 2].to_vec(),
            None,
        ),
        (
            "truncated, unknown event",
            "push",
            opened[..100].to_vec(),
            None,
        ),
        ("empty body", "ping", Vec::new(), None),
        ("not JSON", "pull_request", b"action=opened".to_vec(), None),
        ("trailing garbage", "ping", b"{} {}".to_vec(), None),
        (
            "invalid UTF-8",
            "ping",
            b"{\"zen\":\"\xff\"}".to_vec(),
            None,
        ),
        (
            "head.sha a number",
            "pull_request",
            set(
                "webhooks/pull_request/opened.json",
                "/pull_request/head/sha",
                json!(42),
            ),
            Some("pull_request.head.sha"),
        ),
        (
            "number a string",
            "pull_request",
            set(
                "webhooks/pull_request/opened.json",
                "/pull_request/number",
                json!("2"),
            ),
            Some("pull_request.number"),
        ),
        (
            "label name null",
            "pull_request",
            set(
                "webhooks/pull_request/labeled.json",
                "/pull_request/labels/0/name",
                Value::Null,
            ),
            Some("pull_request.labels[0].name"),
        ),
        (
            "head.ref missing",
            "pull_request",
            remove(
                "webhooks/pull_request/opened.json",
                "/pull_request/head",
                "ref",
            ),
            Some("pull_request.head"),
        ),
        (
            "repository missing",
            "pull_request",
            remove("webhooks/pull_request/opened.json", "", "repository"),
            Some("."),
        ),
        (
            "action a number",
            "pull_request",
            set("webhooks/pull_request/opened.json", "/action", json!(1)),
            Some("action"),
        ),
        (
            "action missing",
            "check_suite",
            remove("webhooks/check_suite/requested.json", "", "action"),
            Some("."),
        ),
        (
            "check run PR number negative",
            "check_run",
            set(
                "webhooks/check_run/requested_action.json",
                "/check_run/pull_requests/0/number",
                json!(-1),
            ),
            Some("check_run.pull_requests[0].number"),
        ),
        (
            "requested_action missing",
            "check_run",
            remove(
                "webhooks/check_run/requested_action.json",
                "",
                "requested_action",
            ),
            Some("."),
        ),
        (
            "identifier missing",
            "check_run",
            remove(
                "webhooks/check_run/requested_action.json",
                "/requested_action",
                "identifier",
            ),
            Some("requested_action"),
        ),
        (
            "installation id a string",
            "check_suite",
            set(
                "webhooks/check_suite/rerequested.json",
                "/installation/id",
                json!("957387"),
            ),
            Some("installation.id"),
        ),
        (
            "comment body null",
            "issue_comment",
            set(
                "webhooks/issue_comment/created.json",
                "/comment/body",
                Value::Null,
            ),
            Some("comment.body"),
        ),
        (
            "installation repositories not a list",
            "installation",
            set(
                "webhooks/installation/created.json",
                "/repositories",
                json!({}),
            ),
            Some("repositories"),
        ),
        (
            "workflow run id a string",
            "workflow_run",
            set(
                "webhooks/workflow_run/completed.json",
                "/workflow_run/id",
                json!("289782451"),
            ),
            Some("workflow_run.id"),
        ),
        (
            "workflow run without display_title",
            "workflow_run",
            remove(
                "webhooks/workflow_run/requested.json",
                "/workflow_run",
                "display_title",
            ),
            Some("workflow_run"),
        ),
        (
            "workflow job status null",
            "workflow_job",
            set(
                "webhooks/workflow_job/in_progress.json",
                "/workflow_job/status",
                Value::Null,
            ),
            Some("workflow_job.status"),
        ),
        (
            "workflow job without run_id",
            "workflow_job",
            remove(
                "webhooks/workflow_job/waiting.json",
                "/workflow_job",
                "run_id",
            ),
            Some("workflow_job"),
        ),
        (
            "workflow job action missing",
            "workflow_job",
            remove("webhooks/workflow_job/queued.json", "", "action"),
            Some("."),
        ),
        (
            "added repo without full_name",
            "installation_repositories",
            remove(
                "webhooks/installation_repositories/added.json",
                "/repositories_added/0",
                "full_name",
            ),
            Some("repositories_added[0]"),
        ),
    ];
    let mut report = String::new();
    for (name, event, body, path) in cases {
        let err = parse(event, &body).expect_err(name);
        match (&err, path) {
            (ParseError::Malformed { .. }, None) => {}
            (
                ParseError::Invalid {
                    event: e, path: p, ..
                },
                Some(want),
            ) => {
                assert_eq!((e.as_str(), p.as_str()), (event, want), "{name}");
                assert!(
                    err.to_string().contains(&format!("`{want}`")),
                    "{name}: {err}"
                );
            }
            _ => panic!("{name}: {err:?}"),
        }
        // Where in the re-serialised fixture it happened depends on serde_json's key order.
        let shown = match &err {
            ParseError::Invalid { .. } => without_location(&err.to_string()),
            ParseError::Malformed { .. } => err.to_string(),
        };
        report.push_str(&format!("{name}: {shown}\n"));
    }
    insta::assert_snapshot!("parse_errors", report);
}

/// `message` without serde_json's trailing ` at line N column M`.
fn without_location(message: &str) -> String {
    match message.rsplit_once(" at line ") {
        Some((head, tail)) if tail.split(" column ").all(|n| n.parse::<u64>().is_ok()) => {
            head.to_owned()
        }
        _ => message.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Fixture → parse → decide.

#[test]
fn fixtures_to_decisions() {
    let policy = AgentPolicy {
        logins: vec!["codertocat".into()],
        bot_authors: false,
        labels: vec![],
        branch_prefixes: vec![],
        commit_trailers: vec![],
    };
    let known_tasks = ["hello-task"];
    let settings = Settings {
        policy: &policy,
        known_tasks: &known_tasks,
    };
    let sha = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
    let stored = PullState {
        is_agent: true,
        task: Some("hello-task".into()),
        grade_requested: false,
        draft: false,
        open: true,
        head_sha: sha.into(),
    };
    let with_task = |rel: &str| {
        edited(rel, |v| {
            v["pull_request"]["body"] = json!("Implements it.\n\nInfraDev-Task: hello-task\n")
        })
    };
    let known_2 = Known {
        pulls: [(2, stored.clone())].into(),
        ..Known::default()
    };
    let cases: Vec<(&str, &str, Vec<u8>, Known)> = vec![
        (
            "opened, task in the body",
            "pull_request",
            with_task("webhooks/pull_request/opened.json"),
            Known::default(),
        ),
        (
            "opened, no task",
            "pull_request",
            fixture("webhooks/pull_request/opened.json"),
            Known::default(),
        ),
        (
            "ready_for_review, no installation in the payload",
            "pull_request",
            with_task("webhooks/pull_request/ready_for_review.json"),
            Known {
                installation_id: Some(5),
                ..Known::default()
            },
        ),
        (
            "converted_to_draft: a draft waits",
            "pull_request",
            fixture("webhooks/pull_request/converted_to_draft.with-installation.json"),
            Known::default(),
        ),
        (
            "closed",
            "pull_request",
            fixture("webhooks/pull_request/closed.json"),
            known_2.clone(),
        ),
        (
            "labeled, nothing new",
            "pull_request",
            with_task("webhooks/pull_request/labeled.json"),
            known_2.clone(),
        ),
        (
            "check_suite rerequested",
            "check_suite",
            fixture("webhooks/check_suite/rerequested.json"),
            known_2.clone(),
        ),
        (
            "check_run rerequested of another app's check run (no external id)",
            "check_run",
            fixture("webhooks/check_run/rerequested.json"),
            Known {
                pulls: [(
                    8,
                    PullState {
                        head_sha: "d6fde92930d4715a2b49857d24b940956b26d2d3".into(),
                        ..stored.clone()
                    },
                )]
                .into(),
                head_prs: vec![8],
                ..Known::default()
            },
        ),
        (
            "check_run rerequested of a job's check run: that job again",
            "check_run",
            edited("webhooks/check_run/rerequested.json", |v| {
                v["check_run"]["external_id"] = json!("17")
            }),
            Known {
                pulls: [(
                    8,
                    PullState {
                        head_sha: "d6fde92930d4715a2b49857d24b940956b26d2d3".into(),
                        ..stored.clone()
                    },
                )]
                .into(),
                check_owner: Some(decide::CheckOwner::Job {
                    number: 8,
                    head_sha: "d6fde92930d4715a2b49857d24b940956b26d2d3".into(),
                    task: "hello-task".into(),
                }),
                ..Known::default()
            },
        ),
        (
            "requested_action of another app's button",
            "check_run",
            fixture("webhooks/check_run/requested_action.json"),
            Known::default(),
        ),
        (
            "issue comment on an issue",
            "issue_comment",
            fixture("webhooks/issue_comment/created.with-installation.json"),
            Known::default(),
        ),
        (
            "ping",
            "ping",
            fixture("webhooks/ping/ping.json"),
            Known::default(),
        ),
        (
            "workflow_run completed wakes the remote follower",
            "workflow_run",
            fixture("webhooks/workflow_run/completed.json"),
            Known::default(),
        ),
        (
            "workflow_job in_progress wakes the remote follower",
            "workflow_job",
            fixture("webhooks/workflow_job/in_progress.json"),
            Known::default(),
        ),
    ];
    let mut report = String::new();
    for (name, event, body, known) in cases {
        let parsed = parse(event, &body).unwrap_or_else(|e| panic!("{name}: {e}"));
        let decided = decide::decide(&parsed, &settings, &known);
        report.push_str(&format!("## {name}\n{decided:#?}\n\n"));
    }
    insta::assert_snapshot!("fixtures_to_decisions", report);

    // The comment → permission → command round trip.
    let body = edited(
        "webhooks/issue_comment/created.with-installation.json",
        |v| {
            v["issue"]["pull_request"] = json!({});
            v["comment"]["body"] = json!("Please look again.\n\n/infradev regrade");
        },
    );
    let decided = decide::decide(
        &parse("issue_comment", &body).unwrap(),
        &settings,
        &Known::default(),
    );
    let [Decision::AskPermission(request)] = &decided.decisions[..] else {
        panic!("{decided:?}")
    };
    let stored_1 = PullState {
        head_sha: "abc".into(),
        ..stored
    };
    let grades = decide::decide_command(request, true, Some(&stored_1));
    let [
        Decision::React { .. },
        Decision::Grade {
            number: 1,
            head_sha,
            reason,
            installation_id: 1,
            ..
        },
        Decision::Reply { .. },
    ] = &grades[..]
    else {
        panic!("{grades:?}")
    };
    assert_eq!(head_sha, "abc");
    assert!(
        reason.new_attempt()
            && matches!(reason, GradeReason::Command { user, .. } if user == "Codertocat")
    );
}
