//! `infradev skill export` through the real binary, on reports made by real grades: the
//! example task's submissions graded by `infradev run` (real git, real Docker) with probes
//! that carry canaries in their source, their names, their test names, their requirements and
//! a hidden input file; then the skill exported from those records, its content checked, and
//! every canary searched for in every file of it, in every encoding we can think of.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use infradev::analysis::run::report::RunReport;
use sha2::{Digest, Sha256};
use support::{
    TASK, copy_dir, docker_ready, example_repo, infradev, local_python_ready, output_text as text,
    root,
};

/// Planted in the probe source (a module constant of a probe file).
const SOURCE: &str = "SkillCanarySource7d41b9e2";
/// Planted in a probe's id.
const PROBE_ID: &str = "skillcanaryid3f9a1c55";
/// Planted in a probe's test function name.
const TEST_NAME: &str = "skillcanaryfn8b2e4d07";
/// Planted in a probe's requirement and in its reason.
const REQUIREMENT: &str = "SkillCanaryRequirement61c0aa3f";
const REASON: &str = "SkillCanaryReason0e5b7d19";
/// Planted in a hidden input file beside the probes.
const INPUT: &str = "SkillCanaryHiddenInput9a2f4c68";

const CANARIES: [&str; 6] = [SOURCE, PROBE_ID, TEST_NAME, REQUIREMENT, REASON, INPUT];

fn replace_once(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from} in {}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// A scratch root with the example task and its probes, the probes carrying the canaries.
fn canary_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    copy_dir(&support::task_dir(), &r.join("tasks/example").join(TASK));
    let probes = r.join("probes").join(TASK);
    copy_dir(&support::probes_dir(), &probes);
    copy_dir(&root().join("runners/python"), &r.join("runners/python"));
    let manifest = probes.join("probes.toml");
    let state = probes.join("test_state.py");
    // The probe's name and its test's name.
    replace_once(
        &manifest,
        "id = \"refcounts_balance_across_steps\"",
        &format!("id = \"refcounts_balance_{PROBE_ID}\""),
    );
    replace_once(
        &manifest,
        "test_state.py::test_refcounts_balance_across_steps\"",
        &format!("test_state.py::test_refcounts_{TEST_NAME}\""),
    );
    replace_once(
        &state,
        "def test_refcounts_balance_across_steps(",
        &format!("def test_refcounts_{TEST_NAME}("),
    );
    // Its requirement and its reason.
    replace_once(
        &manifest,
        "requirement = \"Across 1200",
        &format!("requirement = \"{REQUIREMENT}: across 1200"),
    );
    replace_once(
        &manifest,
        "why_official_tests_miss = \"The official tests check reference counts",
        &format!("why_official_tests_miss = \"{REASON}: the official tests check reference counts"),
    );
    // Its source, and a hidden input the judge can read.
    let mut source = std::fs::read_to_string(&state).unwrap();
    source.push_str(&format!("\n_HIDDEN_NOTE = \"{SOURCE} must never leave\"\n"));
    std::fs::write(&state, source).unwrap();
    std::fs::write(
        probes.join("hidden_inputs.json"),
        format!("{{\"prompt_tokens\": [1, 2, 3], \"note\": \"{INPUT}\"}}\n"),
    )
    .unwrap();
    dir
}

fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The forms a canary could take in text, each with whether case matters: as is and
/// reversed (any case), hex (any case), and base64 at each of the three alignments (the part
/// of the encoding that does not depend on the neighbouring bytes), standard and URL-safe.
fn encodings(canary: &str) -> Vec<(String, bool)> {
    let mut forms = vec![
        (canary.to_owned(), false),
        (canary.chars().rev().collect::<String>(), false),
        (hex::encode(canary), false),
    ];
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
    ] {
        for shift in 0..3usize {
            let padded = format!("{}{canary}", "\0".repeat(shift));
            let enc = engine.encode(padded.as_bytes());
            // From the second group on, a group encodes only canary bytes; the last group
            // may mix in whatever follows.
            let start = if shift == 0 { 0 } else { 4 };
            let end = enc.trim_end_matches('=').len().saturating_sub(4);
            forms.push((enc[start..end].to_owned(), true));
        }
    }
    forms
}

fn found(text: &str, (form, case_sensitive): &(String, bool)) -> bool {
    if *case_sensitive {
        text.contains(form.as_str())
    } else {
        text.to_lowercase().contains(&form.to_lowercase())
    }
}

fn assert_no_canary(dir: &Path) {
    for file in files_below(dir) {
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for canary in CANARIES {
            for form in encodings(canary) {
                assert!(
                    !found(&text, &form),
                    "{} carries canary {canary} as {}",
                    file.display(),
                    form.0
                );
            }
        }
    }
}

#[test]
fn the_canary_forms_are_found_where_they_are() {
    // The search must find each form it checks, or the leak test proves nothing.
    let b64 = base64::engine::general_purpose::STANDARD;
    let url = base64::engine::general_purpose::URL_SAFE;
    for canary in CANARIES {
        let forms = encodings(canary);
        let samples = [
            format!("x {canary} y"),
            format!("x {} y", canary.chars().rev().collect::<String>()),
            format!("x {} y", hex::encode(canary)),
            b64.encode(format!("{canary}!")),
            b64.encode(format!("a{canary}")),
            b64.encode(format!("ab{canary}?")),
            url.encode(format!("ab{canary}")),
        ];
        for s in samples {
            assert!(
                forms.iter().any(|f| found(&s, f)),
                "{canary} not found in {s}"
            );
        }
        // And none of the forms is found where the canary is not.
        assert!(!forms.iter().any(|f| found("a skill about minicache", f)));
    }
}

#[test]
fn a_skill_exported_from_real_grades_carries_their_statistics_and_no_probe() {
    if !docker_ready() {
        return;
    }
    let scratch = canary_root();
    let work = tempfile::tempdir().unwrap();
    let repo = example_repo();
    let lines: Vec<String> = [
        ("rev", "submission/reference".to_owned(), "alpha"),
        ("rev", "submission/wrong".to_owned(), "alpha"),
        (
            "patch",
            root()
                .join("examples/minicache/submissions/broken.patch")
                .display()
                .to_string(),
            "beta",
        ),
    ]
    .into_iter()
    .map(|(kind, change, agent)| {
        serde_json::json!({"task": TASK, "repo": repo, kind: change, "agent": agent}).to_string()
    })
    .collect();
    let subs = work.path().join("subs.jsonl");
    std::fs::write(&subs, lines.join("\n") + "\n").unwrap();
    let runs = work.path().join("runs");
    // The scratch probes carry planted canaries: not the probes the example was validated with.
    let run = infradev(
        scratch.path(),
        &[
            "run",
            "--run-id",
            "s1",
            "--jobs",
            "2",
            "--allow-unvalidated",
        ],
    )
    .arg("--submissions")
    .arg(&subs)
    .arg("--out")
    .arg(&runs)
    .output()
    .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let report: RunReport =
        serde_json::from_slice(&std::fs::read(runs.join("s1/report.json")).unwrap()).unwrap();
    assert_eq!(report.stats.overall.graded, 3, "{}", text(&run));

    // The records carry the probes' test names and requirements (reports name a probe by its
    // test, not its id): the inputs hold those canaries, so their absence below is the
    // exporter's doing. The exporter reads the others itself, from the probe directory.
    let records: String = files_below(&runs.join("s1/submissions"))
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    for canary in [TEST_NAME, REQUIREMENT] {
        assert!(records.contains(canary), "the records should name {canary}");
    }

    let out = work.path().join("skills");
    let export = |extra: &[&str]| {
        infradev(scratch.path(), &["skill", "export", "--reports"])
            .arg(&runs)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = export(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let skill = out.join("infra-pr-testing");
    let names: Vec<String> = files_below(&skill)
        .iter()
        .map(|p| p.strip_prefix(&skill).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "SKILL.md",
            "provenance.json",
            "references/example-block-allocator.md"
        ]
    );
    assert_no_canary(&skill);
    // Nothing but the skill folder is left in --out (no temporary folder).
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);

    let md = std::fs::read_to_string(skill.join("SKILL.md")).unwrap();
    assert!(
        md.starts_with("---\nname: infra-pr-testing\ndescription: \""),
        "{md}"
    );
    // Every category the grades failed in, with its count, in the repository's section.
    let cats = &report.stats.categories[0];
    assert_eq!(cats.repository, "infradev/minicache");
    assert!(!cats.categories.is_empty());
    let section = &md[md.find("## minicache (`infradev/minicache`)").expect(&md)..];
    for (category, n) in &cats.categories {
        let line = format!("- **{category}** ({n} of {} graded failed, ", cats.graded);
        assert!(section.contains(&line), "{line} in {section}");
    }
    let reference =
        std::fs::read_to_string(skill.join("references/example-block-allocator.md")).unwrap();
    assert!(
        reference.contains("`ref_count(block_id: int) -> int`"),
        "{reference}"
    );
    assert!(reference.contains("`num_cached_tokens(seq_id: int) -> int`"));
    assert!(
        reference.contains("- `tests/test_block_allocator.py::test_shared_prefix_reuses_blocks`")
    );

    // The provenance: what the skill was built from, checkable against the folder.
    let p: serde_json::Value =
        serde_json::from_slice(&std::fs::read(skill.join("provenance.json")).unwrap()).unwrap();
    assert_eq!(p["infradev_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(p["counts"]["inputs"], 3);
    assert_eq!(p["counts"]["graded"], 3);
    let mut listing = String::new();
    for f in files_below(&runs.join("s1/submissions")) {
        let rel = f.strip_prefix(&runs).unwrap().display().to_string();
        let sha = hex::encode(Sha256::digest(std::fs::read(&f).unwrap()));
        listing.push_str(&format!("{sha}  {rel}\n"));
    }
    assert_eq!(
        p["inputs_digest"],
        format!("sha256:{}", hex::encode(Sha256::digest(listing.as_bytes())))
    );
    assert_eq!(
        p["inputs"]["summaries"], 2,
        "the run's report.json and flakes.json left out"
    );
    let stats: infradev::analysis::stats::Stats =
        serde_json::from_value(p["stats"].clone()).unwrap();
    assert_eq!(stats, report.stats);
    assert_eq!(
        p["files"]["SKILL.md"],
        hex::encode(Sha256::digest(md.as_bytes()))
    );

    // The official test command the skill gives runs the official tests: on the reference,
    // from the root of a checkout, every one of them passes.
    let command = section
        .split("```sh\n")
        .nth(1)
        .and_then(|s| s.split("\n```").next())
        .expect("a command block");
    assert!(
        command.ends_with(" tests/test_block_allocator.py"),
        "{command}"
    );
    if local_python_ready() {
        let checkout = work.path().join("checkout");
        let git = Command::new("git")
            .args(["clone", "-q", "--branch", "submission/reference"])
            .arg(repo)
            .arg(&checkout)
            .output()
            .unwrap();
        assert!(git.status.success(), "{}", text(&git));
        let ran = Command::new("/bin/sh")
            .args(["-c", command])
            .current_dir(&checkout)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
        assert!(text(&ran).contains(" passed"), "{}", text(&ran));
        assert!(!text(&ran).contains("failed"), "{}", text(&ran));
    }

    // A second export refuses to overwrite without --force, and replaces it with --force.
    let again = export(&[]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("pass --force"), "{}", text(&again));
    let forced = export(&["--force"]);
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced));
    assert_no_canary(&skill);
}

#[test]
fn bad_arguments_are_refused_with_what_is_wrong() {
    let work = tempfile::tempdir().unwrap();
    let reports = work.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    let out = work.path().join("out");
    let export = |extra: &[&str]| {
        let o = infradev(&root(), &["skill", "export", "--reports"])
            .arg(&reports)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        (o.status.code(), text(&o))
    };
    for (extra, says) in [
        (vec!["--name", "Bad_Name"], "--name `Bad_Name`"),
        (
            vec!["--repository", "nobody/nothing"],
            "--repository nobody/nothing: no task of it",
        ),
        (vec![], "no grade reports or run records below"),
    ] {
        let (code, all) = export(&extra);
        assert_eq!(code, Some(2), "{all}");
        assert!(all.contains(says), "{says} in {all}");
        assert!(!out.exists(), "nothing written: {all}");
    }
}
