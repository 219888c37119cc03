use std::path::PathBuf;

use super::guard::{Hidden, Leak, check};
use super::*;
use crate::analysis::stats::{InputFile, Labels, Sample, aggregate};
use crate::grade::report::{Report, fixtures};
use crate::task::Registry;

const PROMPT: &str = "# Make the LRU offload manager evict in order\n\n\
Today it evicts at random.\n\n\
## Interface\n\n\
### `vllm.v1.kv_offload.lru_manager`\n\n\
- `class LRUOffloadingManager(backend: Backend, enable_events: bool = False)`\n\
- `prepare_store(block_hashes: Iterable[int]) -> PrepareStoreOutput | None`\n\n\
## Background\n\nThe old manager kept no order.\n\n\
## Production constraints\n\n\
`touch` is O(1) per block.\n";

fn public_task(id: &str, repository: &str) -> PublicTask {
    PublicTask {
        id: id.into(),
        title: "LRU offloading".into(),
        summary: "An LRU manager for offloaded KV blocks".into(),
        repository: repository.into(),
        pr: 22595,
        prompt: PROMPT.into(),
        python: "3.12".into(),
        packages: vec!["pytest==8.3.5".into()],
        layer: Some("torch-2.8".into()),
        constraints: Some("constraints.txt".into()),
        pytest_plugins: vec!["pytest_asyncio".into()],
        env: vec![("VLLM_TARGET_DEVICE".into(), "cpu only".into())],
        test_files: vec!["tests/v1/kv_offload/test_cpu.py".into()],
        fail_to_pass: vec!["tests/v1/kv_offload/test_cpu.py::test_cpu_manager".into()],
        pass_to_pass: vec![],
        gpus: "none".into(),
        memory_mb: 4096,
        cpus: 2.0,
        test_timeout_s: 300,
        prompt_sha256: "aa".repeat(32),
        manifest_sha256: "bb".repeat(32),
    }
}

fn with_task(mut r: Report, id: &str, repository: &str) -> Report {
    r.task.id = id.into();
    r.task.repository = repository.into();
    r
}

fn stats() -> Stats {
    let l = || Labels {
        agent: "alpha".into(),
        model: None,
        account: None,
    };
    let vllm = |r| with_task(r, "vllm-kv-offload-lru", "vllm-project/vllm");
    aggregate(&[
        Sample::from_report(&vllm(fixtures::resolved()), l()),
        Sample::from_report(&vllm(fixtures::probes_reject()), l()),
        Sample::from_report(&vllm(fixtures::probes_reject()), l()),
        Sample::from_report(&vllm(fixtures::build_failure()), l()),
        Sample::from_report(&vllm(fixtures::infra_error()), l()),
        // A repository the skill has no task of: in the provenance, not in SKILL.md.
        Sample::from_report(&fixtures::resolved(), l()),
    ])
}

fn inputs() -> Inputs {
    Inputs::Reports {
        folder: "runs".into(),
        files: (0..6)
            .map(|i| InputFile {
                path: format!("r1/submissions/s{i}.json"),
                sha256: format!("{i:064}"),
            })
            .collect(),
        summaries: 1,
        skipped: vec![],
    }
}

fn build<'a>(stats: &'a Stats, inputs: &'a Inputs, tasks: &'a [PublicTask]) -> Build<'a> {
    Build {
        name: DEFAULT_NAME,
        stats,
        inputs,
        tasks,
        version: "0.1.0",
        generated_at: "2026-12-02T15:00:00Z",
    }
}

fn file<'a>(skill: &'a Skill, path: &str) -> &'a str {
    &skill
        .files
        .iter()
        .find(|(p, _)| p == path)
        .unwrap_or_else(|| panic!("no {path}"))
        .1
}

#[test]
fn a_skill_has_the_agent_skills_layout() {
    let (stats, inputs) = (stats(), inputs());
    let tasks = [
        public_task("vllm-kv-offload-lru", "vllm-project/vllm"),
        public_task("megatron-x", "NVIDIA/Megatron-LM"),
    ];
    let skill = render(&build(&stats, &inputs, &tasks));
    let paths: Vec<&str> = skill.files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "SKILL.md",
            "references/megatron-x.md",
            "references/vllm-kv-offload-lru.md",
            "provenance.json"
        ]
    );
    let md = file(&skill, "SKILL.md");
    let front = md
        .strip_prefix("---\n")
        .and_then(|r| r.split_once("\n---\n"))
        .expect("front matter between --- lines")
        .0;
    assert!(front.starts_with(&format!("name: {DEFAULT_NAME}\ndescription: \"")));
    let description = front.lines().nth(1).unwrap();
    assert!(description.len() <= 1024 + "description: ".len());
    // Megatron-LM before vLLM (by `owner/name`), each with its own section.
    let megatron = md.find("## Megatron-LM (`NVIDIA/Megatron-LM`)").unwrap();
    let vllm = md.find("## vLLM (`vllm-project/vllm`)").unwrap();
    assert!(megatron < vllm);
    // The repository without a task of the skill is not a section.
    assert!(!md.contains("example/opt"));
}

#[test]
fn categories_are_ranked_by_how_many_graded_submissions_failed_in_them() {
    let (stats, inputs) = (stats(), inputs());
    let tasks = [public_task("vllm-kv-offload-lru", "vllm-project/vllm")];
    let skill = render(&build(&stats, &inputs, &tasks));
    let md = file(&skill, "SKILL.md");
    let section = &md[md.find("## vLLM").unwrap()..];
    let ranked: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("- **"))
        .map(|l| l.split("**").next().unwrap())
        .collect();
    // Two of four graded failed in state and memory (the probes), one in build; the rest in
    // the default order.
    assert_eq!(
        ranked,
        [
            "state",
            "memory",
            "build",
            "time",
            "traffic",
            "numerical",
            "structural"
        ]
    );
    assert!(section.contains("- **state** (2 of 4 graded failed, 50 %): follow blocks"));
    assert!(section.contains("Only 4 graded submission(s)"));
    // A repository nobody was graded on says so instead of inventing figures.
    let tasks = [public_task("megatron-x", "NVIDIA/Megatron-LM")];
    let skill = render(&build(&stats, &inputs, &tasks));
    assert!(file(&skill, "SKILL.md").contains("No graded submissions of this repository yet"));
    assert!(file(&skill, "SKILL.md").contains("- **state** (no grades): replay"));
}

#[test]
fn skill_snapshots() {
    let (stats, inputs) = (stats(), inputs());
    let tasks = [public_task("vllm-kv-offload-lru", "vllm-project/vllm")];
    let skill = render(&build(&stats, &inputs, &tasks));
    insta::assert_snapshot!("skill_md", file(&skill, "SKILL.md"));
    insta::assert_snapshot!(
        "skill_reference",
        file(&skill, "references/vllm-kv-offload-lru.md")
    );
    insta::assert_snapshot!("skill_provenance", file(&skill, "provenance.json"));
}

#[test]
fn the_provenance_names_the_inputs_and_every_file() {
    let (stats, inputs) = (stats(), inputs());
    let tasks = [public_task("vllm-kv-offload-lru", "vllm-project/vllm")];
    let skill = render(&build(&stats, &inputs, &tasks));
    let p: serde_json::Value = serde_json::from_str(file(&skill, "provenance.json")).unwrap();
    assert_eq!(p["format"], PROVENANCE_FORMAT);
    assert_eq!(p["inputs_digest"], inputs.digest());
    assert_eq!(p["counts"]["inputs"], 6);
    assert_eq!(p["counts"]["graded"], 5);
    assert_eq!(p["counts"]["infra_errors"], 1);
    assert_eq!(p["inputs"]["kind"], "reports");
    let stats_back: Stats = serde_json::from_value(p["stats"].clone()).unwrap();
    assert_eq!(stats_back, stats);
    for (path, text) in &skill.files[..skill.files.len() - 1] {
        assert_eq!(
            p["files"][path],
            hex::encode(Sha256::digest(text.as_bytes())),
            "{path}"
        );
    }
}

#[test]
fn skill_names_follow_the_agent_skills_rules() {
    for (name, ok) in [
        (DEFAULT_NAME, true),
        ("a", true),
        ("megatron-2", true),
        ("", false),
        ("Upper", false),
        ("-lead", false),
        ("trail-", false),
        ("double--hyphen", false),
        ("under_score", false),
        ("../escape", false),
        (&"x".repeat(65), false),
    ] {
        assert_eq!(valid_name(name), ok, "{name:?}");
    }
}

#[test]
fn the_official_command_quotes_what_a_shell_would_split() {
    let mut t = public_task("t", "o/r");
    t.test_files.push("tests/with space.py".into());
    // A restored data file is not a test target: pytest is given only the tests' files.
    t.test_files.push("tests/config.yaml".into());
    t.pass_to_pass.push("tests/with space.py::test_a".into());
    t.pass_to_pass
        .push("tests/with space.py::test_b[1-2]".into());
    t.env.push(("Q".into(), "it's".into()));
    assert_eq!(
        official_command(&t),
        "PYTHONPATH=. PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 VLLM_TARGET_DEVICE='cpu only' \
         Q='it'\\''s' python3 -m pytest -c /dev/null --rootdir=. -p no:cacheprovider \
         --continue-on-collection-errors -q -p pytest_asyncio \
         tests/v1/kv_offload/test_cpu.py 'tests/with space.py'"
    );
}

fn example_task() -> (crate::task::Task, Hidden, PublicTask) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let task = Registry::resolve(&root, "example-block-allocator", None).unwrap();
    let prompt = std::fs::read_to_string(task.prompt_path()).unwrap();
    let manifest = std::fs::read(task.manifest_path()).unwrap();
    let sources = task.probes.sources().unwrap();
    let public = format!(
        "{}\n{prompt}\n{}",
        composed_text(),
        String::from_utf8_lossy(&manifest)
    );
    let hidden = Hidden::of(&task, &sources, &public);
    let public_task = PublicTask::of(&task, &prompt, &manifest);
    (task, hidden, public_task)
}

#[test]
fn the_example_tasks_skill_passes_the_guard_and_states_its_interface() {
    let (_, hidden, t) = example_task();
    let (stats, inputs) = (stats(), inputs());
    let tasks = [t];
    let skill = render(&build(&stats, &inputs, &tasks));
    check(&skill.files, &[hidden]).expect("no hidden material");
    let reference = file(&skill, "references/example-block-allocator.md");
    assert!(reference.contains("`ref_count(block_id: int) -> int`"));
    assert!(reference.contains("### Production constraints"));
    assert!(
        file(&skill, "SKILL.md")
            .contains("--continue-on-collection-errors -q tests/test_block_allocator.py\n```")
    );
}

#[test]
fn the_guard_refuses_anything_hidden_and_names_only_its_kind() {
    let (task, hidden, _) = example_task();
    let probe = &task.probes.probes[0];
    let source = task.probes.sources().unwrap();
    let (path, text) = &source[0];
    // The first line of the probe file long enough to count, and not in the prompt.
    let prompt = std::fs::read_to_string(task.prompt_path()).unwrap();
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.len() > 30 && !prompt.contains(l) && !l.starts_with('#'))
        .unwrap();
    let func = probe.test.rsplit("::").next().unwrap();
    for leaked in [
        format!("see {}", probe.id),
        format!("run {}", probe.test),
        format!("the test {func} fails"),
        probe.requirement.clone(),
        probe.why_official_tests_miss.clone(),
        format!("open {path}"),
        format!("x\n    {line}\ny"),
        "INFRADEV-PROBE-CANARY-1234".into(),
        // A constant of test_state.py, in prose.
        "and PROBE_SECRET too".into(),
    ] {
        let files = vec![("SKILL.md".to_owned(), format!("intro\n{leaked}\n"))];
        let err: Leak = check(&files, std::slice::from_ref(&hidden)).unwrap_err();
        assert_eq!(
            (err.file.as_str(), err.task.as_str()),
            ("SKILL.md", task.id.as_str())
        );
        assert!(!err.to_string().contains(leaked.trim()), "{err}");
    }
    // What the prompt states is public, even where a probe says it too.
    let files = vec![("SKILL.md".to_owned(), prompt.clone())];
    check(&files, &[hidden]).unwrap();
}

#[test]
fn every_task_of_the_repository_makes_a_skill_the_guard_accepts() {
    // The guard must not refuse the real tasks' public text: each probe's hidden material is
    // checked against a skill carrying every task's stated interfaces.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let registry = Registry::load(&root).unwrap();
    let tasks: Vec<crate::task::Task> = registry.tasks.into_iter().map(Result::unwrap).collect();
    assert!(tasks.len() >= 5, "the task suite");
    let mut public = composed_text();
    let mut public_tasks = Vec::new();
    for t in &tasks {
        let prompt = std::fs::read_to_string(t.prompt_path()).unwrap();
        let manifest = std::fs::read(t.manifest_path()).unwrap();
        public.push_str(&format!(
            "\n{prompt}\n{}",
            String::from_utf8_lossy(&manifest)
        ));
        public_tasks.push(PublicTask::of(t, &prompt, &manifest));
    }
    let hidden: Vec<Hidden> = tasks
        .iter()
        .map(|t| Hidden::of(t, &t.probes.sources().unwrap(), &public))
        .collect();
    let (stats, inputs) = (stats(), inputs());
    let skill = render(&build(&stats, &inputs, &public_tasks));
    check(&skill.files, &hidden).expect("no hidden material in the real tasks' skill");
    let md = file(&skill, "SKILL.md");
    for section in [
        "## Megatron-LM (`NVIDIA/Megatron-LM`)",
        "## verl (`volcengine/verl`)",
    ] {
        assert!(md.contains(section), "{section}");
    }
}
