use chrono::{NaiveDate, TimeZone, Utc};

use super::*;
use crate::analysis::stats::{Labels, Sample, aggregate, categories_by_agent, series};
use crate::grade::report::fixtures;
use crate::grade::report::{ImageRef, Report};
use crate::grading::Verdict;

const HOSTILE: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&";

fn page_of(report: Report) -> GradePage {
    GradePage {
        id: 42,
        repo: "infradev-mirrors/minicache".into(),
        number: 7,
        head_sha: report.submission.head.clone(),
        task_id: report.task.id.clone(),
        state: "finished".into(),
        author: Some("coder[bot]".into()),
        created_at: Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap(),
        finished_at: Some(Utc.with_ymd_and_hms(2026, 11, 30, 9, 4, 0).unwrap()),
        backend: "local".into(),
        attempts: 1,
        error: None,
        history: vec![
            HistoryRow {
                id: 41,
                head_sha: "0123456789abcdef0123".into(),
                task_id: report.task.id.clone(),
                state: "cancelled".into(),
                verdict: None,
                finished_at: None,
            },
            HistoryRow {
                id: 42,
                head_sha: report.submission.head.clone(),
                task_id: report.task.id.clone(),
                state: "finished".into(),
                verdict: Some(report.grade.verdict),
                finished_at: Some(Utc.with_ymd_and_hms(2026, 11, 30, 9, 4, 0).unwrap()),
            },
        ],
        report: Some(report),
        web_url: "https://github.com/".into(),
        root: "/srv/infradev".into(),
    }
}

#[test]
fn the_public_page_shows_what_the_check_run_shows_and_the_operator_page_everything() {
    let mut report = fixtures::probes_reject();
    report.images = vec![ImageRef {
        tag: "infradev/base:bookworm".into(),
        id: "sha256:0a1b2c".into(),
    }];
    let p = page_of(report.clone());
    let public = render_grade_page(&p, false);
    let operator = render_grade_page(&p, true);
    // Both: the verdict and what did not pass, with category and requirement.
    for html in [&public, &operator] {
        assert!(html.contains("verdict unresolved"), "{html}");
        assert!(html.contains("test_state.py::test_resume_restores_step_count"));
        assert!(html.contains("A resumed optimizer continues from the saved step count."));
        assert!(html.contains("/grades/41"), "the PR's history");
        assert!(!html.contains("PROBE-SECRET"), "probe source never appears");
    }
    // Operators only: passing tests, phases, images, the command, downloads.
    let passing: Vec<&str> = report
        .grade
        .tests
        .iter()
        .filter(|t| t.passed())
        .map(|t| t.evidence.id.as_str())
        .collect();
    assert!(!passing.is_empty());
    for hidden in passing.iter().copied().chain([
        "sha256:0a1b2c",
        "grade --task",
        "--root /srv/infradev",
        "report.json",
        "junit.xml",
    ]) {
        assert!(operator.contains(hidden), "operator page lacks {hidden}");
        assert!(!public.contains(hidden), "public page shows {hidden}");
    }
    assert!(public.contains("/login?next=/grades/42"));
    assert_eq!(
        reproduce_commands(&p),
        "git clone https://github.com/infradev-mirrors/minicache.git submission && cd submission\n\
         git fetch origin pull/7/head && git checkout --detach abcdef0123456789abcdef0123456789abcdef01\n\
         infradev --root /srv/infradev grade --task shard-adam-state --repo . \
         --head abcdef0123456789abcdef0123456789abcdef01 --executor local --json ../report.json \
         --junit ../junit.xml\n"
    );
}

#[test]
fn submission_controlled_strings_are_escaped_everywhere() {
    let mut report = fixtures::probes_reject();
    report.submission.changed_files = vec![HOSTILE.into()];
    report.flags = vec![crate::grade::report::GuardFlag {
        path: HOSTILE.into(),
        reason: HOSTILE.into(),
    }];
    report.grade.tests[0].evidence.id = HOSTILE.into();
    report.grade.tests[0].evidence.exception = Some(HOSTILE.into());
    let mut p = page_of(report);
    p.author = Some(HOSTILE.into());
    p.repo = HOSTILE.into();
    p.task_id = HOSTILE.into();
    p.head_sha = HOSTILE.into();
    p.error = Some(HOSTILE.into());
    for operator in [false, true] {
        let html = render_grade_page(&p, operator);
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("\"'&\""), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }
    let login = render_login(HOSTILE, true);
    assert!(
        !login.contains("<script>") && !login.contains("<img"),
        "{login}"
    );
}

fn labels(agent: &str) -> Labels {
    Labels {
        agent: agent.into(),
        model: None,
        account: Some(agent.into()),
    }
}

fn dashboard() -> Dashboard {
    let d = |day| NaiveDate::from_ymd_opt(2026, 11, day).unwrap();
    let with_repo = |mut r: Report, task: &str, repo: &str| {
        r.task.id = task.into();
        r.task.repository = repo.into();
        r
    };
    let dated = vec![
        (
            d(1),
            Sample::from_report(&fixtures::resolved(), labels("alpha[bot]")),
        ),
        (
            d(1),
            Sample::from_report(&fixtures::probes_reject(), labels("beta[bot]")),
        ),
        (
            d(2),
            Sample::from_report(&fixtures::probes_reject(), labels("alpha[bot]")),
        ),
        (
            d(2),
            Sample::from_report(&fixtures::build_failure(), labels("beta[bot]")),
        ),
        (
            d(3),
            Sample::from_report(
                &with_repo(fixtures::resolved(), "kv-lru", "vllm/vllm"),
                labels("beta[bot]"),
            ),
        ),
        (
            d(3),
            Sample::from_report(&fixtures::infra_error(), labels("alpha[bot]")),
        ),
        (
            d(4),
            Sample::from_report(
                &with_repo(fixtures::probes_reject(), "kv-lru", "vllm/vllm"),
                labels(HOSTILE),
            ),
        ),
    ];
    let samples: Vec<Sample> = dated.iter().map(|(_, s)| s.clone()).collect();
    Dashboard {
        generated_at: Utc.with_ymd_and_hms(2026, 11, 5, 12, 0, 0).unwrap(),
        stats: aggregate(&samples),
        agent_categories: categories_by_agent(&samples),
        periods: series(&dated, 1),
        queue: vec![QueueRow {
            backend: "local".into(),
            queued: 2,
            running: 1,
            finished: 7,
            cancelled: 1,
        }],
        outbox_pending: 3,
        refused_deliveries: 1,
        recent: vec![RecentGrade {
            id: 9,
            repo: "vllm/vllm".into(),
            number: 12,
            task_id: "kv-lru".into(),
            author: HOSTILE.into(),
            verdict: Some(Verdict::Unresolved),
            finished_at: Some(Utc.with_ymd_and_hms(2026, 11, 4, 8, 0, 0).unwrap()),
        }],
    }
}

#[test]
fn the_dashboard_shows_the_aggregated_figures_and_escapes_account_names() {
    let html = render_dashboard(&dashboard());
    // 7 samples, 1 infra: 6 graded, 2 resolved; official passed by 5, probes rejected 3.
    assert!(
        html.contains("Resolved 2 of 6 graded (33.3 %). Passed every official test but rejected by probes: 3 of 5 (60.0 %). Infra errors, not counted: 1."),
        "{html}"
    );
    assert_eq!(
        html.matches("<svg").count(),
        6,
        "3 line charts, 1 bar chart, 2 heatmaps"
    );
    assert!(html.contains("<td>local</td><td class=\"n\">2</td><td class=\"n\">1</td>"));
    assert!(!html.contains("<script>") && !html.contains("<img"));
}

#[test]
fn charts_snapshot() {
    let d = dashboard();
    let x: Vec<String> = d
        .periods
        .iter()
        .map(|p| p.start.format("%m-%d").to_string())
        .collect();
    let line = svg::line_chart(
        "resolved rate per repository over time",
        &x,
        &[
            svg::Line {
                name: "example/opt".into(),
                values: vec![Some(0.5), Some(0.0), None, None],
            },
            svg::Line {
                name: "vllm/vllm".into(),
                values: vec![None, None, Some(1.0), Some(0.0)],
            },
        ],
    );
    insta::assert_snapshot!("line_chart", line.as_str());
    let bars = svg::bar_chart(
        "rejected by probes",
        &[
            svg::Bar {
                name: "all repositories".into(),
                share: 0.6,
                label: "3 of 5 (60.0 %)".into(),
            },
            svg::Bar {
                name: "vllm/vllm".into(),
                share: 0.5,
                label: "1 of 2 (50.0 %)".into(),
            },
        ],
    );
    insta::assert_snapshot!("bar_chart", bars.as_str());
    let heat = svg::heatmap(
        "categories",
        &["state", "memory"],
        &[
            ("example/opt".into(), 4, vec![2, 1]),
            ("vllm/vllm".into(), 2, vec![0, 2]),
        ],
    );
    insta::assert_snapshot!("heatmap", heat.as_str());
}

#[test]
fn a_job_without_a_report_says_where_it_is_and_blames_nobody() {
    let mut p = page_of(fixtures::resolved());
    p.report = None;
    p.state = "queued".into();
    p.finished_at = None;
    let queued = render_grade_page(&p, false);
    assert!(
        queued.contains("<span class=\"verdict pending\">queued</span>"),
        "{queued}"
    );
    assert!(!queued.contains("What did not pass"));
    p.state = "finished".into();
    p.error = Some("infrastructure error: docker: no such image".into());
    let public = render_grade_page(&p, false);
    assert!(
        public.contains("our fault, not the pull request"),
        "{public}"
    );
    assert!(
        !public.contains("no such image"),
        "the error text is for operators"
    );
    let operator = render_grade_page(&p, true);
    assert!(operator.contains("infrastructure error: docker: no such image"));
    assert!(
        !operator.contains("Every test and probe"),
        "no report, no table"
    );
}
