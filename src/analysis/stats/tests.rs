use super::*;
use crate::grade::report::fixtures;

fn labels(agent: &str, model: Option<&str>) -> Labels {
    Labels {
        agent: agent.into(),
        model: model.map(str::to_owned),
        account: None,
    }
}

fn with_task(mut r: Report, id: &str, repository: &str) -> Report {
    r.task.id = id.into();
    r.task.repository = repository.into();
    r
}

/// Two agents on two repositories: every kind of outcome at least once.
fn samples() -> Vec<Sample> {
    let a = || labels("alpha", Some("m-1"));
    let b = || labels("beta", None);
    vec![
        Sample::from_report(&fixtures::resolved(), a()),
        Sample::from_report(&fixtures::probes_reject(), a()),
        Sample::from_report(&fixtures::infra_error(), a()),
        Sample::from_report(&fixtures::build_failure(), b()),
        Sample::from_report(&fixtures::probes_reject(), b()),
        Sample::from_report(&with_task(fixtures::resolved(), "kv-lru", "vllm/vllm"), b()),
        Sample::from_report(
            &with_task(fixtures::not_applied(), "kv-lru", "vllm/vllm"),
            a(),
        ),
        Sample::infra("kv-lru", "vllm/vllm", b()),
    ]
}

#[test]
fn a_sample_reduces_a_report_to_what_the_tables_need() {
    let cases = [
        (
            "resolved",
            fixtures::resolved(),
            SampleOutcome::Resolved,
            true,
            false,
            vec![],
        ),
        (
            "probes reject",
            fixtures::probes_reject(),
            SampleOutcome::Unresolved,
            true,
            true,
            vec![Category::State, Category::Memory],
        ),
        (
            "build failure",
            fixtures::build_failure(),
            SampleOutcome::Unresolved,
            false,
            false,
            vec![Category::Build],
        ),
        (
            "infra",
            fixtures::infra_error(),
            SampleOutcome::Infra,
            false,
            false,
            vec![],
        ),
        (
            "not applied",
            fixtures::not_applied(),
            SampleOutcome::Unresolved,
            false,
            false,
            vec![Category::Build],
        ),
    ];
    for (name, report, outcome, official, rejected, categories) in cases {
        let s = Sample::from_report(&report, labels("a", None));
        assert_eq!(s.outcome, outcome, "{name}");
        assert_eq!(s.official_passed, official, "{name}");
        assert_eq!(s.rejected_by_probes, rejected, "{name}");
        let want: BTreeSet<Category> = categories.into_iter().collect();
        assert_eq!(s.categories, want, "{name}");
    }
}

#[test]
fn tampered_is_graded_unresolved_and_never_official_passed() {
    let mut r = fixtures::resolved();
    r.grade.verdict = Verdict::Tampered;
    let stats = aggregate(&[Sample::from_report(&r, labels("a", None))]);
    let o = &stats.overall;
    assert_eq!(
        (o.graded, o.resolved, o.unresolved, o.tampered),
        (1, 0, 1, 1)
    );
    assert_eq!(o.official_passed, 0);
    assert_eq!(o.resolved_rate, Some(0.0));
}

#[test]
fn infra_errors_are_apart_from_every_rate() {
    let s = samples();
    let stats = aggregate(&s);
    let o = &stats.overall;
    assert_eq!(o.submissions, 8);
    assert_eq!(o.infra_errors, 2);
    assert_eq!(o.graded, 6);
    assert_eq!(o.resolved, 2);
    assert_eq!(o.resolved_rate, Some(2.0 / 6.0));
    // resolved ×2 and probes_reject ×2 passed every official test; the probes rejected two.
    assert_eq!((o.official_passed, o.rejected_by_probes), (4, 2));
    // Dropping the infra samples changes no rate.
    let graded: Vec<Sample> = s
        .into_iter()
        .filter(|x| x.outcome != SampleOutcome::Infra)
        .collect();
    let without = aggregate(&graded);
    assert_eq!(without.overall.resolved_rate, o.resolved_rate);
    for (a, b) in without.by_agent.iter().zip(&stats.by_agent) {
        assert_eq!(a.tally.resolved_rate, b.tally.resolved_rate, "{}", a.key);
    }
}

#[test]
fn the_order_of_samples_does_not_matter() {
    let mut s = samples();
    let forward = aggregate(&s);
    s.reverse();
    assert_eq!(aggregate(&s), forward);
}

#[test]
fn no_graded_sample_gives_no_rate() {
    let stats = aggregate(&[Sample::infra("t", "r", labels("a", None))]);
    assert_eq!(stats.overall.resolved_rate, None);
    assert_eq!(stats.overall.rejected_by_probes_share, None);
    assert!(render_text(&stats).contains("resolved 0 of 0 graded (-)"));
}

#[test]
fn tables_snapshot() {
    let stats = aggregate(&samples());
    insta::assert_json_snapshot!("stats_json", stats);
    insta::assert_snapshot!("stats_text", render_text(&stats));
    insta::assert_snapshot!("stats_markdown", render_markdown(&stats));
    let csv: String = [
        Table::Overall,
        Table::Agents,
        Table::Tasks,
        Table::Repositories,
        Table::Categories,
    ]
    .into_iter()
    .map(|t| render_csv(&stats, t))
    .collect::<Vec<_>>()
    .join("\n");
    insta::assert_snapshot!("stats_csv", csv);
}

#[test]
fn free_form_labels_cannot_break_a_table() {
    let nasty = labels("evil|agent,\"x\"\n\u{1b}[31m", None);
    let stats = aggregate(&[Sample::from_report(&fixtures::resolved(), nasty)]);
    let md = render_markdown(&stats);
    assert!(
        md.contains("| evil\\|agent,\"x\"\u{FFFD}\u{FFFD}[31m |"),
        "{md}"
    );
    let text = render_text(&stats);
    assert!(!text.contains('\u{1b}'), "{text}");
    let csv = render_csv(&stats, Table::Agents);
    assert!(
        csv.contains("\n\"evil|agent,\"\"x\"\"\u{FFFD}\u{FFFD}[31m\",1,1,1,"),
        "{csv}"
    );
}

#[test]
fn categories_per_agent_count_graded_samples_like_per_repository() {
    let rows = categories_by_agent(&samples());
    let keys: Vec<&str> = rows.iter().map(|r| r.repository.as_str()).collect();
    assert_eq!(keys, ["alpha (m-1)", "beta"]);
    // alpha: resolved, probes reject (state, memory), infra (not graded), not applied (build).
    let alpha = &rows[0];
    assert_eq!((alpha.graded, alpha.unresolved), (3, 2));
    assert_eq!(alpha.categories.get("state"), Some(&1));
    assert_eq!(
        alpha.categories.get("infra"),
        None,
        "infra is never a category"
    );
    // The per-repository rows are the same function keyed by repository.
    assert_eq!(
        category_rows(&samples(), |s| s.repository.clone()),
        aggregate(&samples()).categories
    );
}

#[test]
fn a_flaky_grade_is_counted_flaky_and_never_resolved() {
    let s = Sample::from_report(&fixtures::flaky(), labels("alpha", None));
    assert_eq!(s.outcome, SampleOutcome::Unresolved);
    assert!(s.flaky);
    assert!(s.categories.contains(&Category::Memory));
    let stats = aggregate(&[
        s,
        Sample::from_report(&fixtures::resolved(), labels("alpha", None)),
        Sample::from_report(&fixtures::probes_reject(), labels("beta", None)),
    ]);
    let o = &stats.overall;
    assert_eq!((o.graded, o.resolved, o.unresolved, o.flaky), (3, 1, 2, 1));
    let alpha = &stats.by_agent[0];
    assert_eq!((alpha.key.as_str(), alpha.tally.flaky), ("alpha", 1));
    assert_eq!(stats.by_agent[1].tally.flaky, 0);
    assert!(render_text(&stats).contains("; 1 flaky;"));
    let csv = render_csv(&stats, Table::Agents);
    assert!(csv.lines().next().unwrap().ends_with(",flaky"), "{csv}");
    assert!(
        csv.contains("\nalpha,2,2,1,1,0,0,0.5000,2,1,0.5000,1\n"),
        "{csv}"
    );
}
