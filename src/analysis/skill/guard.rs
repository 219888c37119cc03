//! The last check before a skill is written: no file of it may carry anything hidden of any
//! task (probe source, probe ids, test names, requirements, reasons, hidden inputs), unless
//! public text says the same: a task's prompt and manifest, or text of ours. Pure.
//!
//! Rendering only ever sees [`super::PublicTask`], which has no field for a probe; this check
//! is the second line, against a renderer change or a report that smuggles text into the
//! statistics. It is tuned for prose: the redactor's rules (any 8-character line or literal)
//! would refuse ordinary English, so a source line counts from 24 characters and a source
//! token (a word with a digit, an underscore or an inner capital) from 10.

use crate::grade::redact::CANARIES;
use crate::task::Task;

/// Shortest manifest text that counts as hidden: shorter ones (`ok`, `f`) are words of ours.
const MIN_TEXT: usize = 8;
/// Shortest probe source line (trimmed) that counts.
const MIN_LINE: usize = 24;
/// Shortest probe source token that counts.
const MIN_TOKEN: usize = 10;

/// What must not appear in a skill about one task.
#[derive(Debug, Clone)]
pub struct Hidden {
    task: String,
    /// Probe ids, test ids and function names, file names, requirements and reasons.
    texts: Vec<(&'static str, String)>,
    /// Probe source lines, whitespace removed.
    lines: Vec<String>,
    /// Distinctive words of the probe sources: names, constants, secrets.
    tokens: Vec<String>,
}

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

fn distinctive(token: &str) -> bool {
    token.len() >= MIN_TOKEN
        && (token.contains('_')
            || token.chars().any(|c| c.is_ascii_digit())
            || token.chars().skip(1).any(|c| c.is_ascii_uppercase()))
}

impl Hidden {
    /// `sources`: every file of the probe directory but the manifest (`ProbeSet::sources`);
    /// `public`: text every agent may read (every task's prompt and manifest, our own text).
    pub fn of(task: &Task, sources: &[(String, String)], public: &str) -> Hidden {
        let mut texts = Vec::new();
        for p in &task.probes.probes {
            let func = p.test.rsplit("::").next().unwrap_or_default();
            for (what, text) in [
                ("a probe id", p.id.as_str()),
                ("a probe's test id", p.test.as_str()),
                ("a probe's test name", func),
                ("a probe file name", p.file()),
                ("a probe requirement", p.requirement.as_str()),
                ("why a probe exists", p.why_official_tests_miss.as_str()),
            ] {
                texts.push((what, text.trim().to_owned()));
            }
        }
        let squeezed_public = squeeze(public);
        let mut lines = Vec::new();
        let mut tokens = Vec::new();
        for (path, text) in sources {
            texts.push(("a hidden file's name", path.clone()));
            for line in text.lines().map(str::trim) {
                if line.chars().count() >= MIN_LINE {
                    let line = squeeze(line);
                    if !squeezed_public.contains(&line) {
                        lines.push(line);
                    }
                }
            }
            for token in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if distinctive(token) && !public.contains(token) {
                    tokens.push(token.to_owned());
                }
            }
        }
        texts.retain(|(_, t)| t.chars().count() >= MIN_TEXT && !public.contains(t.as_str()));
        for list in [&mut lines, &mut tokens] {
            list.sort();
            list.dedup();
        }
        Hidden {
            task: task.id.clone(),
            texts,
            lines,
            tokens,
        }
    }
}

/// A file of the skill that carries something hidden. It names the file, the task and the kind
/// of thing, never the thing itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file} would carry {what} of task `{task}`: refusing to write the skill")]
pub struct Leak {
    pub file: String,
    pub task: String,
    pub what: &'static str,
}

/// Checks every `(path, text)` of a skill against every task's hidden material.
pub fn check(files: &[(String, String)], hidden: &[Hidden]) -> Result<(), Leak> {
    for (file, text) in files {
        let squeezed = squeeze(text);
        for h in hidden {
            let leak = |what: &'static str| Leak {
                file: file.clone(),
                task: h.task.clone(),
                what,
            };
            if let Some((what, _)) = h.texts.iter().find(|(_, t)| text.contains(t.as_str())) {
                return Err(leak(what));
            }
            if h.lines.iter().any(|l| squeezed.contains(l.as_str())) {
                return Err(leak("a probe source line"));
            }
            if h.tokens.iter().any(|t| text.contains(t.as_str())) {
                return Err(leak("a word of probe source"));
            }
            if CANARIES.iter().any(|c| text.contains(c)) {
                return Err(leak("a canary"));
            }
        }
    }
    Ok(())
}
