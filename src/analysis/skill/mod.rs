//! `infradev skill export`: an agent skill (the Agent Skills layout: a folder named after the
//! skill with `SKILL.md`, YAML front matter `name` + `description`, and files it refers to)
//! built from failure statistics. Pure: the command (`commands::skill`) reads the grades, the
//! tasks and the clock, and writes the files.
//!
//! What goes in: the aggregated [`Stats`] (counts only), what they were built from
//! ([`Inputs`]), and each task's public side ([`PublicTask`]: its prompt and the public parts
//! of its manifest). A `PublicTask` has no field a probe could reach, so nothing hidden can be
//! rendered; [`guard::check`] verifies the result anyway before anything is written.
//!
//! What comes out:
//! - `SKILL.md`: how grades are made, what agents fail most per repository and what their own
//!   tests should check, and per task how to run the official tests locally;
//! - `references/<task>.md`: a task's stated interfaces (from its prompt), official tests,
//!   environment and limits;
//! - `provenance.json`: the statistics and the inputs they were built from (digest, counts),
//!   InfraDev's version and the time, and the SHA-256 of every other file, so a benchmark can
//!   compare resolved rates with and without this exact skill.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::analysis::stats::{CategoryRow, Inputs, Stats, Tally};
use crate::grading::Category;
use crate::task::{Gpus, Task};

mod advice;
pub mod guard;
mod prompt;

pub use prompt::stated_interfaces;

/// The text of ours a skill is made of: the per-category advice and every fixed part of the
/// rendering (rendered around a blank task, so no task's text is in it). Public by
/// construction: the guard does not count it as hidden.
pub fn composed_text() -> String {
    let blank = PublicTask {
        id: String::new(),
        title: String::new(),
        summary: String::new(),
        repository: String::new(),
        pr: 0,
        prompt: String::new(),
        python: String::new(),
        packages: vec![],
        layer: None,
        constraints: None,
        pytest_plugins: vec![],
        env: vec![],
        test_files: vec![],
        fail_to_pass: vec![],
        pass_to_pass: vec![],
        gpus: String::new(),
        memory_mb: 0,
        cpus: 0.0,
        test_timeout_s: 0,
        prompt_sha256: String::new(),
        manifest_sha256: String::new(),
    };
    let inputs = Inputs::Reports {
        folder: String::new(),
        files: vec![],
        summaries: 0,
        skipped: vec![],
    };
    let skill = render(&Build {
        name: DEFAULT_NAME,
        stats: &Stats::default(),
        inputs: &inputs,
        tasks: &[blank],
        version: "",
        generated_at: "",
    });
    let mut all = advice::composed();
    for (_, text) in skill.files {
        all.push('\n');
        all.push_str(&text);
    }
    all
}

/// The skill's name when none is given.
pub const DEFAULT_NAME: &str = "infra-pr-testing";
/// The provenance file's format, for readers that compare skills.
pub const PROVENANCE_FORMAT: &str = "infradev-skill-provenance/1";
/// Below this many graded submissions of a repository, its ranking is called a hint.
const FEW_GRADES: usize = 10;

/// A task as every agent may read it: its prompt and the public parts of its manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct PublicTask {
    pub id: String,
    pub title: String,
    pub summary: String,
    /// `owner/name`.
    pub repository: String,
    pub pr: u64,
    pub prompt: String,
    pub python: String,
    pub packages: Vec<String>,
    pub layer: Option<String>,
    pub constraints: Option<String>,
    pub pytest_plugins: Vec<String>,
    pub env: Vec<(String, String)>,
    pub test_files: Vec<String>,
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
    pub gpus: String,
    pub memory_mb: u64,
    pub cpus: f64,
    pub test_timeout_s: u64,
    /// SHA-256 of prompt.md and of task.toml, for the provenance.
    pub prompt_sha256: String,
    pub manifest_sha256: String,
}

impl PublicTask {
    /// The public side of a task, given the texts of its prompt and manifest.
    pub fn of(task: &Task, prompt: &str, manifest: &[u8]) -> PublicTask {
        let e = &task.environment;
        PublicTask {
            id: task.id.clone(),
            title: task.title.clone(),
            summary: task.summary.clone(),
            repository: task.repository.clone(),
            pr: task.pr,
            prompt: prompt.to_owned(),
            python: e.python.clone(),
            packages: e.packages.clone(),
            layer: e.layer.clone(),
            constraints: e.constraints.as_ref().map(|p| p.display().to_string()),
            pytest_plugins: e.pytest_plugins.clone(),
            env: e.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            test_files: task.tests.files.clone(),
            fail_to_pass: task.tests.fail_to_pass.clone(),
            pass_to_pass: task.tests.pass_to_pass.clone(),
            gpus: match &task.resources.gpus {
                Gpus::Count(0) => "none".into(),
                Gpus::Count(n) => n.to_string(),
                Gpus::Ids(ids) => format!("{} ({})", ids.len(), ids.join(", ")),
            },
            memory_mb: task.resources.memory_mb,
            cpus: task.resources.cpus,
            test_timeout_s: task.resources.test_timeout_s,
            prompt_sha256: sha256(prompt.as_bytes()),
            manifest_sha256: sha256(manifest),
        }
    }
}

/// Everything a skill is built from.
#[derive(Debug, Clone)]
pub struct Build<'a> {
    pub name: &'a str,
    pub stats: &'a Stats,
    pub inputs: &'a Inputs,
    /// The tasks the skill covers, in any order; their repositories are the sections.
    pub tasks: &'a [PublicTask],
    pub version: &'a str,
    /// RFC 3339.
    pub generated_at: &'a str,
}

/// The skill's files, `(path relative to the skill folder, text)`, `SKILL.md` first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub files: Vec<(String, String)>,
}

/// Whether `name` is a valid skill name: 1-64 lowercase letters, digits and single hyphens,
/// neither first nor last. It is also the folder's name.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// One repository's part of the skill.
struct Repo<'a> {
    name: &'a str,
    tasks: Vec<&'a PublicTask>,
    tally: Option<&'a Tally>,
    categories: Option<&'a CategoryRow>,
}

impl Repo<'_> {
    /// Categories by how many graded submissions failed in them, most first; then the ones
    /// nobody failed in, in the default order.
    fn ranked(&self) -> Vec<(Category, usize)> {
        let count = |c: Category| {
            self.categories
                .and_then(|r| r.categories.get(c.as_str()))
                .copied()
                .unwrap_or(0)
        };
        let mut ranked: Vec<(Category, usize)> =
            advice::ORDER.iter().map(|&c| (c, count(c))).collect();
        // Stable: equal counts keep the default order.
        ranked.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        ranked
    }

    fn graded(&self) -> usize {
        self.categories.map_or(0, |r| r.graded)
    }
}

/// Renders the skill.
pub fn render(b: &Build) -> Skill {
    let mut by_repo: BTreeMap<&str, Vec<&PublicTask>> = BTreeMap::new();
    for t in b.tasks {
        by_repo.entry(t.repository.as_str()).or_default().push(t);
    }
    let repos: Vec<Repo> = by_repo
        .into_iter()
        .map(|(name, mut tasks)| {
            tasks.sort_by(|x, y| x.id.cmp(&y.id));
            Repo {
                name,
                tasks,
                tally: b
                    .stats
                    .by_repository
                    .iter()
                    .find(|r| r.key == name)
                    .map(|r| &r.tally),
                categories: b.stats.categories.iter().find(|r| r.repository == name),
            }
        })
        .collect();
    let mut files = vec![("SKILL.md".to_owned(), skill_md(b, &repos))];
    for repo in &repos {
        for t in &repo.tasks {
            files.push((reference_path(t), reference_md(t, b.stats)));
        }
    }
    let provenance = provenance(b, &files);
    files.push(("provenance.json".to_owned(), provenance));
    Skill {
        name: b.name.to_owned(),
        files,
    }
}

fn reference_path(t: &PublicTask) -> String {
    format!("references/{}.md", t.id)
}

/// The repository's name as its project writes it: `Megatron-LM`, `vLLM`, `verl`.
fn short_name(repository: &str) -> &str {
    match repository.rsplit('/').next().unwrap_or(repository) {
        "vllm" => "vLLM",
        name => name,
    }
}

fn pct(num: usize, den: usize) -> String {
    if den == 0 {
        "-".into()
    } else {
        format!("{:.0} %", num as f64 * 100.0 / den as f64)
    }
}

/// A YAML double-quoted scalar.
fn yaml_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A word for a POSIX shell: bare when it is plainly safe, single-quoted otherwise.
fn sh_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The official tests as the grader runs them, for a checkout's root: the repository on
/// `PYTHONPATH` (never pip-installed), no plugin autoloading and none of the repository's
/// pytest configuration, the task's own plugins and variables.
pub fn official_command(t: &PublicTask) -> String {
    let mut words = vec![
        "PYTHONPATH=.".to_owned(),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1".to_owned(),
    ];
    words.extend(t.env.iter().map(|(k, v)| format!("{}={}", k, sh_word(v))));
    words.extend(
        [
            "python3",
            "-m",
            "pytest",
            "-c",
            "/dev/null",
            "--rootdir=.",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            "-q",
        ]
        .map(str::to_owned),
    );
    for p in &t.pytest_plugins {
        words.extend(["-p".to_owned(), sh_word(p)]);
    }
    // What the grader runs: the files of the FAIL_TO_PASS and PASS_TO_PASS tests (not every
    // restored file: data and config files are restored too, and pytest cannot run them).
    let ids = t
        .fail_to_pass
        .iter()
        .chain(&t.pass_to_pass)
        .map(String::as_str);
    words.extend(crate::grade::test_targets(ids).iter().map(|f| sh_word(f)));
    words.join(" ")
}

fn description(repos: &[Repo]) -> String {
    let names: Vec<&str> = repos.iter().map(|r| short_name(r.name)).collect();
    format!(
        "Test your own change to {} the way InfraDev grades pull requests: which failure \
         categories agents fail most on each repository (from graded submissions), what your \
         own tests should check (state across steps and ranks, memory, time, communication \
         traffic, numerics, interfaces), each task's stated interfaces, and how to run its \
         official tests locally. Use when writing or testing a pull request for one of these \
         repositories.",
        names.join(", ")
    )
}

fn skill_md(b: &Build, repos: &[Repo]) -> String {
    let mut s = String::new();
    let o = &b.stats.overall;
    let _ = writeln!(s, "---");
    let _ = writeln!(s, "name: {}", b.name);
    let _ = writeln!(s, "description: {}", yaml_str(&description(repos)));
    let _ = writeln!(s, "metadata:");
    let _ = writeln!(
        s,
        "  generator: {}",
        yaml_str(&format!("infradev {}", b.version))
    );
    let _ = writeln!(s, "  generated-at: {}", yaml_str(b.generated_at));
    let _ = writeln!(s, "  statistics-digest: {}", yaml_str(&b.inputs.digest()));
    let _ = writeln!(s, "  provenance: \"provenance.json\"");
    let _ = writeln!(s, "---");
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "# Testing infrastructure changes the way they are graded"
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "A grade runs the task's official tests, then hidden checks of what those tests leave \
         unchecked: state across calls, steps, failures and ranks; memory; time; communication \
         traffic; numerics against an independent reference; the stated interfaces. Passing \
         the official tests is not enough: of the {} graded submissions this skill was built \
         from, {} passed every official test and {} of those ({}) were still rejected. {} of \
         the {} were resolved ({}).",
        o.graded,
        o.official_passed,
        o.rejected_by_probes,
        pct(o.rejected_by_probes, o.official_passed),
        o.resolved,
        o.graded,
        pct(o.resolved, o.graded),
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "## How to use this skill");
    let _ = writeln!(s);
    for line in [
        "1. Read the task's prompt. Implement every interface exactly as stated: module paths, \
         names, parameter names (calls use keywords), return types, the exceptions raised, \
         config keys. The stated interfaces of each task are in `references/<task>.md`.",
        "2. Run the task's official tests locally (the command under the task below), from the \
         root of your checkout.",
        "3. Write tests of your own for every category below, starting with the ones agents \
         fail most on your repository, and run them on the task's limits (CPUs, memory, GPUs, \
         time per test; no network).",
        "4. Keep everything that worked before working: existing tests must still pass.",
    ] {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "## What your own tests should check");
    let _ = writeln!(s);
    for c in advice::ORDER {
        let _ = writeln!(
            s,
            "- **{}** (`{}`: {}). {}",
            advice::title(c),
            c.as_str(),
            advice::meaning(c),
            advice::general(c)
        );
    }
    for repo in repos {
        let _ = writeln!(s);
        repo_section(&mut s, repo, b.stats);
    }
    s
}

fn repo_section(s: &mut String, repo: &Repo, stats: &Stats) {
    let _ = writeln!(s, "## {} (`{}`)", short_name(repo.name), repo.name);
    let _ = writeln!(s);
    let graded = repo.graded();
    match repo.tally {
        Some(t) if t.graded > 0 => {
            let _ = writeln!(
                s,
                "{} graded submissions: {} resolved ({}); {} passed every official test, and \
                 {} of those were rejected by the hidden checks.",
                t.graded,
                t.resolved,
                pct(t.resolved, t.graded),
                t.official_passed,
                t.rejected_by_probes,
            );
        }
        _ => {
            let _ = writeln!(
                s,
                "No graded submissions of this repository yet: the order below is the default \
                 one, not a measurement."
            );
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "### Where agents fail here, and what to check first");
    let _ = writeln!(s);
    if graded > 0 && graded < FEW_GRADES {
        let _ = writeln!(
            s,
            "Only {graded} graded submission(s): read the order as a hint.\n"
        );
    }
    for (c, n) in repo.ranked() {
        let figure = if graded == 0 {
            "no grades".to_owned()
        } else {
            format!("{n} of {graded} graded failed, {}", pct(n, graded))
        };
        let hint = advice::for_repository(repo.name, c)
            .map(|h| format!(": {h}"))
            .unwrap_or_default();
        let _ = writeln!(s, "- **{}** ({figure}){hint}.", c.as_str());
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "### Tasks");
    for t in &repo.tasks {
        let _ = writeln!(s);
        let _ = writeln!(s, "#### `{}`: {}", t.id, t.title);
        let _ = writeln!(s);
        if let Some(row) = stats.by_task.iter().find(|r| r.key == t.id)
            && row.tally.graded > 0
        {
            let _ = writeln!(
                s,
                "Resolved {} of {} graded ({}).",
                row.tally.resolved,
                row.tally.graded,
                pct(row.tally.resolved, row.tally.graded)
            );
            let _ = writeln!(s);
        }
        let _ = writeln!(
            s,
            "Stated interfaces, official tests and environment: [{}]({}).",
            reference_path(t),
            reference_path(t)
        );
        let _ = writeln!(
            s,
            "Limits: {} CPU(s), {} MiB of memory, GPUs: {}, {} s per test, no network.",
            t.cpus, t.memory_mb, t.gpus, t.test_timeout_s
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Official tests, from the root of your checkout (Python {}):",
            t.python
        );
        let _ = writeln!(s);
        let _ = writeln!(s, "```sh\n{}\n```", official_command(t));
    }
}

fn reference_md(t: &PublicTask, stats: &Stats) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# `{}`: {}", t.id, t.title);
    let _ = writeln!(s);
    let _ = writeln!(s, "{}", t.summary);
    let _ = writeln!(s);
    let _ = writeln!(s, "Upstream: `{}` pull request #{}.", t.repository, t.pr);
    if let Some(row) = stats.by_task.iter().find(|r| r.key == t.id)
        && row.tally.graded > 0
    {
        let _ = writeln!(
            s,
            "Graded submissions: {}, resolved {} ({}).",
            row.tally.graded,
            row.tally.resolved,
            pct(row.tally.resolved, row.tally.graded)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "## Stated interfaces (from the task's prompt)");
    let _ = writeln!(s);
    let _ = writeln!(s, "{}", stated_interfaces(&t.prompt));
    let _ = writeln!(s);
    let _ = writeln!(s, "## Official tests");
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "Files: {}. Before grading, these files are replaced by the maintainers' version \
         (the reference commit's), so your edits to them do not count, and the tests the \
         maintainers add are run against your change.",
        list(&t.test_files)
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "From the root of your checkout (Python {}):", t.python);
    let _ = writeln!(s);
    let _ = writeln!(s, "```sh\n{}\n```", official_command(t));
    for (title, ids) in [
        ("Tests the change must make pass", &t.fail_to_pass),
        ("Tests that must keep passing", &t.pass_to_pass),
    ] {
        if ids.is_empty() {
            continue;
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "{title}:");
        let _ = writeln!(s);
        for id in ids {
            let _ = writeln!(s, "- `{id}`");
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "## Environment and limits");
    let _ = writeln!(s);
    let _ = writeln!(s, "- Python {}", t.python);
    if let Some(layer) = &t.layer {
        let _ = writeln!(s, "- Shared layer: `{layer}`");
    }
    if !t.packages.is_empty() {
        let _ = writeln!(s, "- Packages: {}", list(&t.packages));
    }
    if let Some(c) = &t.constraints {
        let _ = writeln!(s, "- Pinned by the task's `{c}`");
    }
    if !t.pytest_plugins.is_empty() {
        let _ = writeln!(s, "- pytest plugins: {}", list(&t.pytest_plugins));
    }
    for (k, v) in &t.env {
        let _ = writeln!(s, "- `{k}={v}`");
    }
    let _ = writeln!(
        s,
        "- {} CPU(s), {} MiB of memory, GPUs: {}, {} s per test, no network",
        t.cpus, t.memory_mb, t.gpus, t.test_timeout_s
    );
    s
}

fn list(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[derive(Serialize)]
struct Provenance<'a> {
    format: &'static str,
    skill: &'a str,
    infradev_version: &'a str,
    generated_at: &'a str,
    /// `sha256:` over the counted inputs (`Inputs::digest`): equal digests, equal grades.
    inputs_digest: String,
    inputs: &'a Inputs,
    counts: Counts,
    tasks: Vec<TaskProvenance<'a>>,
    /// SHA-256 of every other file of the skill.
    files: BTreeMap<&'a str, String>,
    stats: &'a Stats,
}

#[derive(Serialize)]
struct Counts {
    /// Records and reports read.
    inputs: usize,
    submissions: usize,
    graded: usize,
    resolved: usize,
    infra_errors: usize,
}

#[derive(Serialize)]
struct TaskProvenance<'a> {
    id: &'a str,
    repository: &'a str,
    prompt_sha256: &'a str,
    task_toml_sha256: &'a str,
}

fn provenance(b: &Build, files: &[(String, String)]) -> String {
    let o = &b.stats.overall;
    let mut tasks: Vec<TaskProvenance> = b
        .tasks
        .iter()
        .map(|t| TaskProvenance {
            id: &t.id,
            repository: &t.repository,
            prompt_sha256: &t.prompt_sha256,
            task_toml_sha256: &t.manifest_sha256,
        })
        .collect();
    tasks.sort_by(|x, y| x.id.cmp(y.id));
    let p = Provenance {
        format: PROVENANCE_FORMAT,
        skill: b.name,
        infradev_version: b.version,
        generated_at: b.generated_at,
        inputs_digest: b.inputs.digest(),
        inputs: b.inputs,
        counts: Counts {
            inputs: b.inputs.count(),
            submissions: o.submissions,
            graded: o.graded,
            resolved: o.resolved,
            infra_errors: o.infra_errors,
        },
        tasks,
        files: files
            .iter()
            .map(|(p, t)| (p.as_str(), sha256(t.as_bytes())))
            .collect(),
        stats: b.stats,
    };
    serde_json::to_string_pretty(&p).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests;
