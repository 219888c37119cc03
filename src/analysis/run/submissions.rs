//! The submissions file of `infradev run`: JSON Lines, one submission per line (pure parsing).
//!
//! ```text
//! {"task": "example-block-allocator", "repo": "minicache", "rev": "submission/wrong", "agent": "acme", "model": "m-1"}
//! {"task": "example-block-allocator", "repo": "minicache", "patch": "patches/p.diff", "agent": "acme"}
//! {"task": "example-block-allocator", "repo": "minicache", "diff": "diff --git a/...", "agent": "acme"}
//! ```
//!
//! - `task` (required): a task id.
//! - `repo` (required): a git checkout holding the task's base and reference commits; a
//!   relative path is relative to the submissions file's folder. It is never written to.
//! - exactly one of `rev` (a revision of `repo`: the submission's head), `patch` (a file with
//!   a unified diff against the task's base commit, relative like `repo`) or `diff` (the diff
//!   itself, as a JSON string).
//! - `agent` (required), `model`, `account`: free-form labels the report groups by.
//! - `id` (optional): the submission's name in `runs/<id>/submissions/`; letters, digits,
//!   `.`, `_`, `-`. Without it, a name is derived from the task, the agent and a digest of
//!   the line, so it stays the same when lines move.
//!
//! Blank lines are skipped. Unknown fields, a missing field and two lines with the same name
//! are errors naming the file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::analysis::stats::Labels;

/// One line as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    task: String,
    repo: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    patch: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    diff: Option<String>,
    agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    account: Option<String>,
}

/// What is graded: a revision of a repository, or a diff against the task's base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// A revision of `repo`.
    Rev(String),
    /// A file holding a unified diff.
    PatchFile(PathBuf),
    /// A unified diff given inline.
    Diff(String),
}

/// One submission, checked and with its paths resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// Its name under `runs/<id>/submissions/` (`<key>.json`).
    pub key: String,
    /// 1-based line number in the submissions file.
    pub line: usize,
    pub task: String,
    pub repo: PathBuf,
    pub change: Change,
    pub labels: Labels,
}

/// A bad line: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {message}", file.display())]
pub struct LineError {
    pub file: PathBuf,
    pub line: usize,
    pub message: String,
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 100
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A file-name-safe rendering of a label.
fn slug(text: &str, max: usize) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect();
    s.trim_start_matches('.').to_owned()
}

/// Parses a submissions file's text. `file` names it in errors; relative paths are resolved
/// against `file`'s folder. Returns every bad line, not only the first.
pub fn parse(file: &Path, text: &str) -> Result<Vec<Submission>, Vec<LineError>> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut errors = Vec::new();
    let mut out = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let err = |message: String| LineError {
            file: file.to_path_buf(),
            line: n,
            message,
        };
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = match serde_json::from_str(raw) {
            Ok(l) => l,
            Err(e) => {
                errors.push(err(format!("not a submission: {e}")));
                continue;
            }
        };
        let mut problems = Vec::new();
        for (field, value) in [("task", &line.task), ("agent", &line.agent)] {
            if value.trim().is_empty() {
                problems.push(format!("`{field}` is empty"));
            }
        }
        if line.repo.as_os_str().is_empty() {
            problems.push("`repo` is empty".to_owned());
        }
        let change = match (&line.rev, &line.patch, &line.diff) {
            (Some(rev), None, None) if !rev.trim().is_empty() => Some(Change::Rev(rev.clone())),
            (None, Some(p), None) => Some(Change::PatchFile(dir.join(p))),
            (None, None, Some(d)) if !d.trim().is_empty() => Some(Change::Diff(d.clone())),
            (None, None, None) => {
                problems.push("name the change: one of `rev`, `patch` or `diff`".to_owned());
                None
            }
            (Some(_), None, None) => {
                problems.push("`rev` is empty".to_owned());
                None
            }
            (None, None, Some(_)) => {
                problems.push("`diff` is empty".to_owned());
                None
            }
            _ => {
                problems.push("give only one of `rev`, `patch` and `diff`".to_owned());
                None
            }
        };
        if let Some(id) = &line.id
            && !valid_id(id)
        {
            problems.push(format!(
                "`id` {id:?} must be 1-100 letters, digits, `.`, `_` or `-`, not starting with `.`"
            ));
        }
        let (Some(change), true) = (change, problems.is_empty()) else {
            errors.push(err(problems.join("; ")));
            continue;
        };
        let key = line.id.clone().unwrap_or_else(|| {
            let digest = Sha256::digest(serde_json::to_vec(&line).unwrap_or_default());
            format!(
                "{}--{}--{}",
                slug(&line.task, 40),
                slug(&line.agent, 30),
                &hex::encode(digest)[..10]
            )
        });
        if let Some(first) = seen.insert(key.clone(), n) {
            errors.push(err(format!(
                "submission `{key}` is also on line {first}; give each line its own `id`"
            )));
            continue;
        }
        out.push(Submission {
            key,
            line: n,
            task: line.task,
            repo: dir.join(&line.repo),
            change,
            labels: Labels {
                agent: line.agent,
                model: line.model,
                account: line.account,
            },
        });
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/b/subs.jsonl";

    fn one(line: &str) -> Result<Submission, String> {
        parse(Path::new(FILE), line)
            .map(|mut v| v.remove(0))
            .map_err(|e| {
                e.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
    }

    #[test]
    fn good_lines() {
        let s = one(r#"{"task":"t","repo":"r","rev":"main","agent":"a","model":"m","id":"x-1"}"#)
            .unwrap();
        assert_eq!(s.key, "x-1");
        assert_eq!(s.repo, PathBuf::from("/b/r"));
        assert_eq!(s.change, Change::Rev("main".into()));
        assert_eq!(s.labels.agent_key(), "a (m)");
        let s = one(r#"{"task":"t","repo":"/abs/r","patch":"p/x.diff","agent":"a"}"#).unwrap();
        assert_eq!(s.repo, PathBuf::from("/abs/r"));
        assert_eq!(s.change, Change::PatchFile("/b/p/x.diff".into()));
        assert!(s.key.starts_with("t--a--"), "{}", s.key);
        let s = one(r#"{"task":"t","repo":"r","diff":"--- a\n","agent":"a b/c"}"#).unwrap();
        assert!(s.key.starts_with("t--a_b_c--"), "{}", s.key);
        assert_eq!(s.change, Change::Diff("--- a\n".into()));
    }

    #[test]
    fn derived_names_do_not_depend_on_line_numbers() {
        let a = r#"{"task":"t","repo":"r","rev":"x","agent":"a"}"#;
        let b = r#"{"task":"t","repo":"r","rev":"y","agent":"a"}"#;
        let first = parse(Path::new(FILE), &format!("{a}\n{b}\n")).unwrap();
        let second = parse(Path::new(FILE), &format!("{b}\n\n{a}\n")).unwrap();
        assert_eq!(first[0].key, second[1].key);
        assert_eq!(second[1].line, 3);
        assert_ne!(first[0].key, first[1].key);
    }

    #[test]
    fn bad_lines_name_file_line_and_what_is_wrong() {
        let cases = [
            ("{", "/b/subs.jsonl:1: not a submission: EOF while parsing"),
            (
                r#"{"task":"t","repo":"r","rev":"x"}"#,
                "/b/subs.jsonl:1: not a submission: missing field `agent`",
            ),
            (
                r#"{"task":"t","repo":"r","rev":"x","agent":"a","colour":1}"#,
                "/b/subs.jsonl:1: not a submission: unknown field `colour`",
            ),
            (
                r#"{"task":"t","repo":"r","agent":"a"}"#,
                "/b/subs.jsonl:1: name the change: one of `rev`, `patch` or `diff`",
            ),
            (
                r#"{"task":"t","repo":"r","rev":"x","diff":"d","agent":"a"}"#,
                "/b/subs.jsonl:1: give only one of `rev`, `patch` and `diff`",
            ),
            (
                r#"{"task":" ","repo":"r","rev":"","agent":""}"#,
                "/b/subs.jsonl:1: `task` is empty; `agent` is empty; `rev` is empty",
            ),
            (
                r#"{"id":"../x","task":"t","repo":"r","rev":"x","agent":"a"}"#,
                "/b/subs.jsonl:1: `id` \"../x\" must be",
            ),
        ];
        for (line, want) in cases {
            let got = one(line).unwrap_err();
            assert!(got.starts_with(want), "{line}\n got: {got}\nwant: {want}");
        }
    }

    #[test]
    fn every_bad_line_is_reported_and_duplicates_name_both_lines() {
        let text = concat!(
            r#"{"id":"s","task":"t","repo":"r","rev":"x","agent":"a"}"#,
            "\n\n",
            r#"{"task":"t"}"#,
            "\n",
            r#"{"id":"s","task":"t","repo":"r","rev":"y","agent":"a"}"#,
            "\n"
        );
        let errors = parse(Path::new(FILE), text).unwrap_err();
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [3, 4]);
        assert!(
            errors[1].message.contains("`s` is also on line 1"),
            "{}",
            errors[1]
        );
    }
}
