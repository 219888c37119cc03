//! What `infradev tasks new` proposes for a new task, from what git and one run of the
//! official tests say: the merged commit of a pull request, the test files and packages its
//! change touched, FAIL_TO_PASS / PASS_TO_PASS from the outcomes on the base and the reference
//! (as SWE-bench's harness derives them), and the files a task starts from. Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::grading::Outcome;
use crate::task::Area;

/// The commit that merged a pull request, found in `git log --format=%H%x1f%P%x1f%s` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrCommit {
    pub sha: String,
    /// Its first parent: the base the change was made against.
    pub parent: String,
    pub subject: String,
}

/// Finds the newest commit that merged pull request `pr`: a squash merge whose subject ends
/// with `(#N)`, or a merge commit `Merge pull request #N from …`.
pub fn find_pr_commit(log: &str, pr: u64) -> Option<PrCommit> {
    let squash = format!("(#{pr})");
    let merge = format!("Merge pull request #{pr} ");
    log.lines().find_map(|line| {
        let mut fields = line.splitn(3, '\x1f');
        let (sha, parents, subject) = (fields.next()?, fields.next()?, fields.next()?);
        let subject = subject.trim();
        let matches = subject.ends_with(&squash) || subject.starts_with(&merge);
        let parent = parents.split_whitespace().next()?;
        matches.then(|| PrCommit {
            sha: sha.to_owned(),
            parent: parent.to_owned(),
            subject: subject.to_owned(),
        })
    })
}

/// What a change touched, sorted by what a task needs of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    /// Test files added or changed (`test_*.py`, `*_test.py`): the official tests.
    pub test_files: Vec<String>,
    /// Other Python files added or changed: the code the task asks for.
    pub sources: Vec<String>,
    /// Top-level import names of `sources` (`[upstream] packages`, read by `tasks lint`).
    pub packages: Vec<String>,
    /// Test infrastructure the change edited (`conftest.py`, pytest config): graded as the
    /// reference's, worth a look.
    pub test_infrastructure: Vec<String>,
}

/// Folders that hold no importable package of the project.
const NOT_PACKAGES: &[&str] = &[
    "tests",
    "test",
    "docs",
    "doc",
    "examples",
    "example",
    "scripts",
    "benchmarks",
    "tools",
    "ci",
    ".github",
];

/// Sorts `git diff --name-status base reference` output (`M\tpath`, `A\tpath`, `D\tpath`,
/// `R100\told\tnew`).
pub fn touched(name_status: &str) -> Touched {
    let mut t = Touched::default();
    for line in name_status.lines() {
        let mut fields = line.split('\t');
        let status = fields.next().unwrap_or_default();
        let Some(path) = fields.next_back() else {
            continue;
        };
        if status.starts_with('D') || path.is_empty() {
            continue;
        }
        let name = path.rsplit('/').next().unwrap_or(path);
        if name == "conftest.py"
            || matches!(
                name,
                "pytest.ini" | "tox.ini" | "setup.cfg" | "pyproject.toml"
            )
        {
            t.test_infrastructure.push(path.to_owned());
            continue;
        }
        if !name.ends_with(".py") {
            continue;
        }
        if name.starts_with("test_") || name.ends_with("_test.py") {
            t.test_files.push(path.to_owned());
            continue;
        }
        let parts: Vec<&str> = path.split('/').collect();
        if parts.len() < 2 || NOT_PACKAGES.contains(&parts[0]) {
            continue; // setup.py, tests/helpers.py, docs/conf.py …
        }
        t.sources.push(path.to_owned());
        let package = if parts[0] == "src" && parts.len() > 2 {
            parts[1]
        } else {
            parts[0]
        };
        if is_identifier(package) && !t.packages.iter().any(|p| p == package) {
            t.packages.push(package.to_owned());
        }
    }
    for list in [
        &mut t.test_files,
        &mut t.sources,
        &mut t.packages,
        &mut t.test_infrastructure,
    ] {
        list.sort();
        list.dedup();
    }
    t
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The official test lists proposed from one run on the base and one on the reference.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proposal {
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
    /// Tests left out, each with why (fails on the reference, skipped, …).
    pub left_out: Vec<(String, String)>,
}

/// A test of the reference run that does not pass there is left out; one that passes is
/// PASS_TO_PASS when it passed on the base too and FAIL_TO_PASS when it failed there or did
/// not run (a new test, or a file that cannot be imported on the base). A test skipped on the
/// base says nothing about the change and is left out.
pub fn propose(
    base: &BTreeMap<String, Outcome>,
    reference: &BTreeMap<String, Outcome>,
) -> Proposal {
    let mut p = Proposal::default();
    for (id, outcome) in reference {
        if *outcome != Outcome::Passed {
            p.left_out
                .push((id.clone(), format!("{} on the reference", outcome.as_str())));
            continue;
        }
        match base.get(id).copied().unwrap_or(Outcome::NotRun) {
            Outcome::Passed => p.pass_to_pass.push(id.clone()),
            Outcome::Failed | Outcome::NotRun => p.fail_to_pass.push(id.clone()),
            Outcome::Skipped | Outcome::Flaky => p
                .left_out
                .push((id.clone(), format!("{} on the base", base[id].as_str()))),
        }
    }
    for id in base.keys().filter(|id| !reference.contains_key(*id)) {
        p.left_out
            .push((id.clone(), "not in the reference's test files".to_owned()));
    }
    p
}

/// Everything `task.toml` is written from.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    pub id: String,
    pub repository: String,
    pub pr: u64,
    pub area: Area,
    pub title: String,
    pub base_commit: String,
    pub reference_commit: String,
    pub base_image: String,
    pub python: String,
    pub layer: Option<String>,
    pub packages: Vec<String>,
    pub touched: Touched,
}

/// `task.toml`, with the proposal's lists (empty when the tests were not run).
pub fn render_task_toml(task: &NewTask, proposal: &Proposal) -> String {
    let mut out = String::new();
    let q = toml_string;
    let _ = writeln!(
        out,
        "# Scaffolded by `infradev tasks new`; the lists under [tests] were proposed from one run\n\
         # of the official tests on the base and on the reference. Review every line."
    );
    let _ = writeln!(out, "id = {}", q(&task.id));
    let _ = writeln!(out, "title = {}", q(&task.title));
    let _ = writeln!(
        out,
        "summary = {}",
        q(&format!(
            "TODO: one line on what {} #{} adds",
            task.repository, task.pr
        ))
    );
    let _ = writeln!(out, "repository = {}", q(&task.repository));
    let _ = writeln!(out, "pr = {}", task.pr);
    let _ = writeln!(out, "area = {}", q(task.area.as_str()));
    let _ = writeln!(
        out,
        "# ranks = 2   # when probes start rank groups: the most ranks a group has"
    );
    let _ = writeln!(out, "base_commit = {}", q(&task.base_commit));
    let _ = writeln!(out, "reference_commit = {}", q(&task.reference_commit));
    let _ = writeln!(out, "\n[environment]");
    let _ = writeln!(out, "base_image = {}", q(&task.base_image));
    let _ = writeln!(out, "python = {}", q(&task.python));
    if let Some(layer) = &task.layer {
        let _ = writeln!(out, "layer = {}", q(layer));
    }
    let _ = writeln!(out, "packages = {}", toml_list(&task.packages));
    let _ = writeln!(out, "\n[upstream]");
    let _ = writeln!(out, "packages = {}", toml_list(&task.touched.packages));
    let _ = writeln!(out, "validate_from = \"git\"");
    let _ = writeln!(out, "\n[tests]");
    let _ = writeln!(out, "files = {}", toml_list(&task.touched.test_files));
    let _ = writeln!(out, "fail_to_pass = {}", toml_list(&proposal.fail_to_pass));
    let _ = writeln!(out, "pass_to_pass = {}", toml_list(&proposal.pass_to_pass));
    for (id, why) in &proposal.left_out {
        let _ = writeln!(out, "# left out: {id} ({why})");
    }
    let _ = writeln!(out, "default_category = \"state\"");
    let _ = writeln!(
        out,
        "\n[resources]\ngpus = 0\nmemory_mb = 4096\ncpus = 2.0\npids = 256\ntest_timeout_s = 120\n\n\
         [resources.timeouts]\nbuild_s = 1800\ntests_s = 600\nprobes_s = 600"
    );
    out
}

/// `prompt.md`: the parts every prompt has, each to be written.
pub fn render_prompt(task: &NewTask) -> String {
    let mut out = format!("# {}\n\n", task.title);
    out.push_str(
        "TODO: the problem, as an issue would state it: what is wrong or missing and why it \
         matters, without the solution.\n\n",
    );
    if !task.touched.test_files.is_empty() {
        let _ = writeln!(
            out,
            "The maintainers' tests will go into {}. Change the code only.\n",
            task.touched
                .test_files
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    out.push_str(
        "## Interface\n\nTODO: every module, class, function, parameter name and exception the \
         probes call, with types and shapes (`infradev tasks lint` checks that each symbol the \
         probes use is named here).\n\n",
    );
    if !task.touched.sources.is_empty() {
        out.push_str("The change touched:\n\n");
        for s in &task.touched.sources {
            let _ = writeln!(out, "- `{s}`");
        }
        out.push('\n');
    }
    out.push_str(
        "## Semantics\n\nTODO: what must hold (state across calls and ranks, numerics, memory, \
         time, traffic), stated so that a correct solution other than the reference passes.\n",
    );
    out
}

/// `probes/<id>/probes.toml` with one probe to write.
pub fn render_probes_toml(id: &str) -> String {
    format!(
        "task = {}\n\n\
         [[probe]]\n\
         id = \"public_interface\"\n\
         test = \"test_interface.py::test_public_interface\"\n\
         category = \"structural\"\n\
         requirement = \"TODO: the interface the prompt states exists, with its parameter names and errors\"\n\
         why_official_tests_miss = \"TODO\"\n",
        toml_string(id)
    )
}

/// `probes/<id>/test_interface.py`: a probe on the probe library that fails until written,
/// so a scaffold can never validate.
pub fn render_probe_skeleton(packages: &[String]) -> String {
    let module = packages.first().map(String::as_str).unwrap_or("TODO");
    format!(
        "\"\"\"Structural probe: the interface the prompt states (docs/probe-protocol.md).\"\"\"\n\
         \n\
         import pytest\n\
         \n\
         from infradev_probe import subject\n\
         \n\
         pkg = subject.module({module:?})\n\
         \n\
         \n\
         def test_public_interface():\n\
         \x20   \"\"\"Requirement: TODO (the same words as probes.toml).\"\"\"\n\
         \x20   pytest.fail(\"probe not written yet\")\n"
    )
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn toml_list(items: &[String]) -> String {
    if items.is_empty() {
        return "[]".to_owned();
    }
    let mut out = String::from("[\n");
    for item in items {
        let _ = writeln!(out, "    {},", toml_string(item));
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::*;

    #[test]
    fn finds_squash_and_merge_commits_newest_first() {
        let log = "a1\x1fp1\x1fFix the thing (#12)\n\
                   b2\x1fp2 q2\x1fMerge pull request #7 from someone/branch\n\
                   c3\x1fp3\x1fOlder fix (#12)\n\
                   d4\x1fp4\x1fMention of #7 in passing\n\
                   e5\x1fp5\x1fNot (#123)";
        let c = find_pr_commit(log, 12).unwrap();
        assert_eq!((c.sha.as_str(), c.parent.as_str()), ("a1", "p1"));
        let c = find_pr_commit(log, 7).unwrap();
        assert_eq!((c.sha.as_str(), c.parent.as_str()), ("b2", "p2"));
        assert_eq!(find_pr_commit(log, 1), None);
        assert_eq!(find_pr_commit(log, 23), None, "#123 is not #23");
        assert_eq!(find_pr_commit("root\x1f\x1fInitial (#5)", 5), None);
    }

    #[test]
    fn sorts_what_a_change_touched() {
        let t = touched(
            "M\tverl/trainer/ppo/core_algos.py\n\
             A\ttests/trainer/test_core_algos_on_cpu.py\n\
             M\tsrc/vllm_ext/ops.py\n\
             R090\told/helpers.py\tverl/utils/helpers.py\n\
             D\tverl/gone.py\n\
             M\ttests/conftest.py\n\
             M\tpkg/kernel_test.py\n\
             M\tdocs/conf.py\n\
             M\tsetup.py\n\
             M\tREADME.md\n\
             M\tpyproject.toml\n\
             A\ttests/helpers.py",
        );
        assert_eq!(
            t.test_files,
            [
                "pkg/kernel_test.py",
                "tests/trainer/test_core_algos_on_cpu.py"
            ]
        );
        assert_eq!(
            t.sources,
            [
                "src/vllm_ext/ops.py",
                "verl/trainer/ppo/core_algos.py",
                "verl/utils/helpers.py"
            ]
        );
        assert_eq!(t.packages, ["verl", "vllm_ext"]);
        assert_eq!(
            t.test_infrastructure,
            ["pyproject.toml", "tests/conftest.py"]
        );
    }

    #[test]
    fn proposes_the_lists_from_both_runs() {
        let runs = |pairs: &[(&str, Outcome)]| -> BTreeMap<String, Outcome> {
            pairs.iter().map(|(i, o)| (i.to_string(), *o)).collect()
        };
        let base = runs(&[
            ("t.py::kept", Passed),
            ("t.py::fixed", Failed),
            ("t.py::skipped_base", Skipped),
            ("t.py::broken", Passed),
            ("t.py::removed", Passed),
        ]);
        let reference = runs(&[
            ("t.py::kept", Passed),
            ("t.py::fixed", Passed),
            ("t.py::new", Passed),
            ("t.py::skipped_base", Passed),
            ("t.py::broken", Failed),
            ("t.py::skipped_ref", Skipped),
        ]);
        let p = propose(&base, &reference);
        assert_eq!(p.fail_to_pass, ["t.py::fixed", "t.py::new"]);
        assert_eq!(p.pass_to_pass, ["t.py::kept"]);
        let left: Vec<(&str, &str)> = p
            .left_out
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(
            left,
            [
                ("t.py::broken", "failed on the reference"),
                ("t.py::skipped_base", "skipped on the base"),
                ("t.py::skipped_ref", "skipped on the reference"),
                ("t.py::removed", "not in the reference's test files"),
            ]
        );
    }

    fn sample() -> NewTask {
        NewTask {
            id: "verl-pr2337".into(),
            repository: "volcengine/verl".into(),
            pr: 2337,
            area: Area::Rl,
            title: "GAE skips \"observation\" tokens".into(),
            base_commit: "1".repeat(40),
            reference_commit: "2".repeat(40),
            base_image: "infradev-base:bookworm".into(),
            python: "3.11".into(),
            layer: Some("torch-2.8".into()),
            packages: vec![],
            touched: touched("M\tverl/core.py\nA\ttests/test_core.py"),
        }
    }

    #[test]
    fn renders_a_task_toml_that_parses() {
        let proposal = Proposal {
            fail_to_pass: vec!["tests/test_core.py::test_new".into()],
            pass_to_pass: vec!["tests/test_core.py::test_old".into()],
            left_out: vec![(
                "tests/test_core.py::test_gpu".into(),
                "skipped on the reference".into(),
            )],
        };
        let text = render_task_toml(&sample(), &proposal);
        insta::assert_snapshot!(text);
        let value: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            value["title"].as_str(),
            Some("GAE skips \"observation\" tokens")
        );
        assert_eq!(
            value["tests"]["fail_to_pass"][0].as_str(),
            Some("tests/test_core.py::test_new")
        );
    }

    #[test]
    fn renders_the_prompt_and_probe_skeletons() {
        let task = sample();
        insta::assert_snapshot!(render_prompt(&task));
        let probes: toml::Value = toml::from_str(&render_probes_toml(&task.id)).unwrap();
        assert_eq!(probes["task"].as_str(), Some("verl-pr2337"));
        let skeleton = render_probe_skeleton(&task.touched.packages);
        assert!(skeleton.contains("subject.module(\"verl\")"));
        assert!(skeleton.contains("pytest.fail("));
    }
}
