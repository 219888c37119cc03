//! `infradev tasks check|list|show` through the real binary: every manifest error names the
//! file, the line and the field.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{TASK, copy_dir, root};

/// A root holding a copy of the example task and its probes, to break on purpose.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(
            &root().join("tasks/example").join(TASK),
            &dir.path().join("tasks/example").join(TASK),
        );
        copy_dir(
            &root().join("probes").join(TASK),
            &dir.path().join("probes").join(TASK),
        );
        Scratch { dir }
    }

    fn task_toml(&self) -> PathBuf {
        self.dir
            .path()
            .join("tasks/example")
            .join(TASK)
            .join("task.toml")
    }

    fn probes_toml(&self) -> PathBuf {
        self.dir
            .path()
            .join("probes")
            .join(TASK)
            .join("probes.toml")
    }

    /// Replaces the first line starting with `key` in `file`; returns that line's number.
    fn replace_line(&self, file: &Path, key: &str, new: &str) -> usize {
        let text = std::fs::read_to_string(file).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no `{key}` line"));
        lines[at] = new.to_owned();
        std::fs::write(file, lines.join("\n") + "\n").unwrap();
        at + 1
    }

    fn check(&self) -> (i32, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
            .arg("--root")
            .arg(self.dir.path())
            .args(["tasks", "check"])
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }
}

#[track_caller]
fn assert_names(output: &str, file: &Path, line: usize, field: &str, words: &str) {
    let prefix = format!("{}:{line}:", file.display());
    let hit = output.lines().find(|l| l.starts_with(&prefix));
    let hit = hit.unwrap_or_else(|| panic!("no error at {prefix} in:\n{output}"));
    assert!(
        hit.contains(&format!("field `{field}`")),
        "the error names `{field}`: {hit}"
    );
    assert!(hit.contains(words), "the error says `{words}`: {hit}");
}

impl Scratch {
    /// `tasks check` fails, naming `field` at `line` of task.toml with `words`.
    fn fails_at(&self, line: usize, field: &str, words: &str) {
        let (code, out) = self.check();
        assert_eq!(code, 2, "{out}");
        assert_names(&out, &self.task_toml(), line, field, words);
    }
}

#[test]
fn the_shipped_tasks_check_clean() {
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(root())
        .args(["tasks", "check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("no problems"), "{text}");
}

#[test]
fn a_follow_up_release_names_a_pinned_release_and_clean_paths() {
    let s = Scratch::new();
    let sha = "a".repeat(64);
    s.replace_line(
        &s.task_toml(),
        "validate_from",
        &format!(
            "validate_from = \"release\"\nbase_release = \"pkg==1.0\"\nbase_sha256 = \"{sha}\"\n\
             reference_release = \"pkg==1.1\"\nreference_sha256 = \"{sha}\""
        ),
    );
    let table = s.replace_line(
        &s.task_toml(),
        "note",
        &format!(
            "[[upstream.follow_up_release]]\nrelease = \"pkg==2.0\"\nsha256 = \"{sha}\"\n\
             paths = [\"pkg/../setup.py\"]"
        ),
    );
    s.fails_at(
        table + 3,
        "upstream.follow_up_release.paths",
        "`pkg/../setup.py` is not a relative path inside the repository",
    );

    s.replace_line(&s.task_toml(), "paths", "paths = [\"pkg/lru.py\"]");
    let release = s.replace_line(
        &s.task_toml(),
        "release = \"pkg==2.0",
        "release = \"pkg-2.0\"",
    );
    s.fails_at(
        release,
        "upstream.follow_up_release.release",
        "`pkg-2.0` is not `name==version`",
    );

    s.replace_line(
        &s.task_toml(),
        "release = \"pkg-2.0",
        "release = \"pkg==2.0\"",
    );
    let (code, out) = s.check();
    assert_eq!(code, 0, "{out}");

    // A git source takes fix commits instead.
    let line = s.replace_line(&s.task_toml(), "validate_from", "validate_from = \"git\"");
    for key in [
        "base_release",
        "base_sha256",
        "reference_release",
        "reference_sha256",
    ] {
        s.replace_line(&s.task_toml(), key, "");
    }
    let (code, out) = s.check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("field `upstream.follow_up_release`") && out.contains("upstream.follow_up)"),
        "{out} (line {line})"
    );
}

#[test]
fn a_task_without_a_failing_upstream_test_says_why() {
    let s = Scratch::new();
    // No FAIL_TO_PASS test at all: refused unless the manifest says why.
    let text = std::fs::read_to_string(s.task_toml()).unwrap();
    let start = text.find("fail_to_pass = [").unwrap();
    let end = start + text[start..].find("]\n").unwrap() + 2;
    let empty = format!("{}fail_to_pass = []\n{}", &text[..start], &text[end..]);
    std::fs::write(s.task_toml(), &empty).unwrap();
    let (code, out) = s.check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("tests.fail_to_pass is empty") && out.contains("tests.no_fail_to_pass"),
        "{out}"
    );

    let line = s.replace_line(
        &s.task_toml(),
        "fail_to_pass",
        "fail_to_pass = []\nno_fail_to_pass = \"\"",
    );
    s.fails_at(line + 1, "tests.no_fail_to_pass", "say why");

    s.replace_line(
        &s.task_toml(),
        "no_fail_to_pass",
        "no_fail_to_pass = \"a performance change: upstream added no test\"",
    );
    let (code, out) = s.check();
    assert_eq!(code, 0, "the probes fail on the base instead: {out}");

    // ...unless every probe only guards what the base already does.
    let probes = std::fs::read_to_string(s.probes_toml()).unwrap();
    std::fs::write(
        s.probes_toml(),
        probes
            .replace("checks_base_behaviour = true\n", "")
            .replace("[[probe]]\n", "[[probe]]\nchecks_base_behaviour = true\n"),
    )
    .unwrap();
    let (code, out) = s.check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("some probe must check what the change adds"),
        "{out}"
    );
    std::fs::write(s.probes_toml(), probes).unwrap();

    // The reason is only for a task that has no FAIL_TO_PASS test.
    std::fs::write(
        s.task_toml(),
        text.replace(
            "fail_to_pass = [",
            "no_fail_to_pass = \"no test\"\nfail_to_pass = [",
        ),
    )
    .unwrap();
    let (code, out) = s.check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("field `tests.no_fail_to_pass`: only for a task whose fail_to_pass is empty"),
        "{out}"
    );
}

#[test]
fn an_unknown_key_is_named_with_its_line() {
    let s = Scratch::new();
    let line = s.replace_line(&s.task_toml(), "title", "colour = \"red\"");
    let (code, out) = s.check();
    assert_eq!(code, 2, "{out}");
    assert_names(&out, &s.task_toml(), line, "colour", "unknown field");
}

#[test]
fn a_bad_commit_is_named_with_its_line() {
    let s = Scratch::new();
    let line = s.replace_line(&s.task_toml(), "base_commit", "base_commit = \"abc123\"");
    let (code, out) = s.check();
    assert_eq!(code, 2);
    assert_names(
        &out,
        &s.task_toml(),
        line,
        "base_commit",
        "not a 40-hex commit SHA",
    );
}

#[test]
fn a_follow_up_fix_must_be_a_commit_of_a_git_source() {
    let s = Scratch::new();
    let line = s.replace_line(
        &s.task_toml(),
        "validate_from",
        "validate_from = \"git\"\nfollow_up = [\"e9c43b9\"]",
    );
    s.fails_at(
        line + 1,
        "upstream.follow_up",
        "`e9c43b9` is not a 40-hex commit SHA",
    );
    let sha = "e9c43b9365f4ca9940e2063ad41de6c7ff1cc029";
    s.replace_line(
        &s.task_toml(),
        "follow_up",
        &format!("follow_up = [\"{sha}\"]"),
    );
    let (code, out) = s.check();
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_value_of_the_wrong_type_is_named_with_its_line() {
    let s = Scratch::new();
    let line = s.replace_line(&s.task_toml(), "pr =", "pr = \"one\"");
    let (code, out) = s.check();
    assert_eq!(code, 2);
    assert_names(&out, &s.task_toml(), line, "pr", "invalid type");
}

#[test]
fn a_probe_may_not_declare_an_evidence_only_category() {
    let s = Scratch::new();
    let line = s.replace_line(&s.probes_toml(), "category", "category = \"infra\"");
    let (code, out) = s.check();
    assert_eq!(code, 2);
    assert_names(
        &out,
        &s.probes_toml(),
        line,
        "probe.category",
        "decided by evidence",
    );
}

#[test]
fn a_missing_probe_file_is_named() {
    let s = Scratch::new();
    let line = s.replace_line(
        &s.probes_toml(),
        "test =",
        "test = \"test_gone.py::test_x\"",
    );
    let (code, out) = s.check();
    assert_eq!(code, 2);
    assert_names(&out, &s.probes_toml(), line, "probe.test", "test_gone.py");
}

#[test]
fn duplicate_ids_and_missing_prompts_are_reported() {
    let s = Scratch::new();
    let twin = s.dir.path().join("tasks/other").join(TASK);
    copy_dir(s.task_toml().parent().unwrap(), &twin);
    std::fs::remove_file(twin.join("prompt.md")).unwrap();
    let (code, out) = s.check();
    assert_eq!(code, 2);
    assert!(
        out.contains(&format!("duplicate task id `{TASK}`")),
        "{out}"
    );
    assert!(
        out.contains("prompt.md:1:1: cannot read the prompt"),
        "{out}"
    );
}

#[test]
fn list_and_show_never_print_probe_source() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
            .arg("--root")
            .arg(root())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(run(&["tasks", "list"]).contains(TASK));
    let shown = run(&["tasks", "show", TASK]);
    assert!(shown.contains("FAIL_TO_PASS"), "{shown}");
    assert!(
        !shown.contains("PROBE-SECRET-") && !shown.contains("INFRADEV-PROBE-CANARY"),
        "{shown}"
    );
}

#[test]
fn retries_are_bounded_and_named_with_their_line() {
    let s = Scratch::new();
    let line = s.replace_line(
        &s.task_toml(),
        "default_category",
        "default_category = \"state\"\nretries = 9",
    );
    s.fails_at(
        line + 1,
        "tests.retries",
        "9 reruns is too many (at most 5)",
    );

    let s = Scratch::new();
    let line = s.replace_line(
        &s.probes_toml(),
        "task =",
        &format!("task = \"{TASK}\"\nretries = 6"),
    );
    let (code, out) = s.check();
    assert_eq!(code, 2, "{out}");
    assert_names(
        &out,
        &s.probes_toml(),
        line + 1,
        "retries",
        "6 reruns is too many",
    );

    // In range, both are accepted (without the power record, whose probe digest the edit
    // of probes.toml would make stale).
    let s = Scratch::new();
    std::fs::remove_file(s.task_toml().with_file_name("validation.json")).unwrap();
    s.replace_line(
        &s.task_toml(),
        "default_category",
        "default_category = \"state\"\nretries = 0",
    );
    s.replace_line(
        &s.probes_toml(),
        "task =",
        &format!("task = \"{TASK}\"\nretries = 5"),
    );
    let (code, out) = s.check();
    assert_eq!(code, 0, "{out}");
}

/// A task whose reference flaked in `tasks validate` is quarantined: validation.json says
/// why, `tasks check` fails naming it and `tasks list` shows it.
#[test]
fn a_quarantined_task_fails_check_and_list_shows_why() {
    let s = Scratch::new();
    let record = s.task_toml().with_file_name("validation.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let why =
        "the reference is flaky: `test_time.py::test_x` passed only on a rerun in reference-2";
    v["quarantined"] = why.into();
    std::fs::write(&record, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let (code, out) = s.check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(&format!("{TASK}: quarantined: {why}")),
        "{out}"
    );
    let list = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(s.dir.path())
        .args(["tasks", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(list.contains(&format!("[quarantined: {why}]")), "{list}");

    // Validated again without the quarantine, it is lifted.
    v.as_object_mut().unwrap().remove("quarantined");
    std::fs::write(&record, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let (code, out) = s.check();
    assert_eq!(code, 0, "{out}");
}

#[test]
fn area_and_ranks_are_checked_with_their_line() {
    let s = Scratch::new();
    let line = s.replace_line(&s.task_toml(), "area", "area = \"serving\"");
    s.fails_at(line, "area", "unknown variant `serving`");
    s.replace_line(&s.task_toml(), "area", "area = \"inference\"\nranks = 5");
    s.fails_at(
        line + 1,
        "ranks",
        "5: the probes' rank groups have 2 to 4 ranks",
    );
    s.replace_line(&s.task_toml(), "ranks", "ranks = 2");
    let (code, out) = s.check();
    assert_eq!(code, 0, "{out}");
    // A per-rank traffic budget means rank groups: the task must say how many ranks.
    s.replace_line(&s.task_toml(), "ranks", "");
    s.replace_line(
        &s.probes_toml(),
        "[probe.budget]",
        "[probe.budget]\nrank_bytes = 65536",
    );
    let (code, out) = s.check();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("field `ranks`") && out.contains("per-rank traffic budget"),
        "{out}"
    );
}

/// The README's task table between its markers, exactly as `infradev tasks table` prints it.
#[test]
fn the_readme_task_table_is_what_tasks_table_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(root())
        .args(["tasks", "table"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let (begin, end) = (
        "<!-- begin: `infradev tasks table` -->\n",
        "<!-- end: `infradev tasks table` -->",
    );
    let start = readme
        .find(begin)
        .expect("README has the table's begin marker")
        + begin.len();
    let stop = readme[start..]
        .find(end)
        .expect("README has the end marker")
        + start;
    assert_eq!(
        &readme[start..stop],
        table,
        "README.md's task table is stale: paste `infradev tasks table` between the markers"
    );
    for task in std::fs::read_dir(root().join("probes")).unwrap() {
        let id = task.unwrap().file_name().into_string().unwrap();
        assert!(
            table.contains(&format!("| `{id}` |")),
            "{id} is in the table"
        );
    }
}

#[test]
fn a_reject_names_a_python_file_a_line_and_probes_of_the_task() {
    let s = Scratch::new();
    let mut text = std::fs::read_to_string(s.task_toml()).unwrap();
    let first = text.lines().count() + 2;
    text.push_str(
        "\n[[reject]]\npath = \"minicache/block_allocator.py\"\nline = 143\n\
         operator = \"copy_removed\"\nprobes = [\"returned_tables_are_the_callers_own\"]\n\
         why = \"the caller gets the allocator's own table\"\n",
    );
    std::fs::write(s.task_toml(), &text).unwrap();
    let (code, out) = s.check();
    assert_eq!(code, 0, "{out}");
    let path = first + 1;
    let line = first + 2;
    let operator = first + 3;
    let probes = first + 4;
    // Operator names are snake_case and may hold digits (`p2p_ops_doubled`).
    let keep = std::fs::read_to_string(s.task_toml()).unwrap();
    s.replace_line(
        &s.task_toml(),
        "operator =",
        "operator = \"p2p_ops_doubled\"",
    );
    let (code, out) = s.check();
    assert_eq!(code, 0, "{out}");
    std::fs::write(s.task_toml(), keep).unwrap();
    for (at, key, new, words) in [
        (
            path,
            "path =",
            "path = \"../outside.py\"",
            "relative to the repository root",
        ),
        (
            path,
            "path =",
            "path = \"README.md\"",
            "a Python file's path",
        ),
        (line, "line =", "line = 0", "lines count from 1"),
        (
            operator,
            "operator =",
            "operator = \"2p_ops\"",
            "an operator of runners/tasks/mutate.py",
        ),
        (
            operator,
            "operator =",
            "operator = \"Copy-Removed\"",
            "an operator of runners/tasks/mutate.py",
        ),
        (
            probes,
            "probes =",
            "probes = []",
            "name the probes that must fail",
        ),
        (
            probes,
            "probes =",
            "probes = [\"no_such_probe\"]",
            "`no_such_probe` is not a probe of this task",
        ),
    ] {
        let keep = std::fs::read_to_string(s.task_toml()).unwrap();
        assert_eq!(s.replace_line(&s.task_toml(), key, new), at);
        let field = format!("reject.{}", key.trim_end_matches(" =").trim());
        s.fails_at(at, &field, words);
        std::fs::write(s.task_toml(), keep).unwrap();
    }
}
