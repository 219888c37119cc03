//! Redaction: nothing that reproduces hidden probe source may leave the grader.
//!
//! Probes are hidden so that a submission cannot be tuned to them; a report that quotes them
//! (a failure message that embeds a source line, code that reads the probe file and raises
//! with its content) would undo that. Messages are therefore redacted against the probe
//! sources before any report is built, with three rules:
//!
//! 1. **Lines.** Every line of the text that contains a probe source line is replaced whole by
//!    [`LINE_MARKER`]. Probe lines count when they are at least 8 characters after trimming,
//!    carry at least 4 alphanumerics and are not trivially generic (`import pytest`, ...).
//!    Matching ignores whitespace (so re-indented or `" ".join(src.split())` text still
//!    matches) and also looks through one or two levels of Python / JSON string escaping
//!    (`repr()` of a file shows `\n` and `\'`), so a whole file printed on one line is caught.
//! 2. **String literals** of the probe sources (each line of their value, and each piece
//!    between format placeholders, 8 characters or more) are masked with [`MASK`] wherever
//!    they occur, also in their escaped forms: expected values and assertion messages are
//!    the most informative part of a probe.
//! 3. **Canaries.** Any token containing `PROBE-SECRET-` or `INFRADEV-PROBE-CANARY` is masked
//!    wherever it occurs; probes plant these so that tests can prove nothing leaks.
//!
//! Redaction runs after classification (which needs the raw messages) and before rendering.
//! It is deliberately over-eager: hiding an innocent line costs little, leaking a probe
//! costs the task.

use crate::grade::report::Report;
use crate::grading::{Grade, TestEvidence};

/// Replaces a whole line that reproduces a probe source line.
pub const LINE_MARKER: &str = "[redacted: matches hidden probe source]";
/// Replaces a probe string literal or canary token inside a line.
pub const MASK: &str = "[redacted]";

/// Markers of planted secrets; any token containing one is masked.
pub const CANARIES: &[&str] = &["PROBE-SECRET-", "INFRADEV-PROBE-CANARY"];

/// Probe lines so common in any Python file that matching them would hide innocent text.
const GENERIC_LINES: &[&str] = &[
    "import pytest",
    "import torch",
    "import numpy",
    "import numpy as np",
    "import math",
    "import os",
    "import sys",
    "import re",
    "import json",
    "from __future__ import annotations",
    "return None",
    "return True",
    "return False",
    "continue",
    "finally:",
    "except Exception:",
    "@pytest.fixture",
    "@pytest.fixture()",
    "if __name__ == \"__main__\":",
    "if __name__ == '__main__':",
];

/// Literals too common to mask.
const GENERIC_LITERALS: &[&str] = &["__main__"];

/// Shortest probe line or literal piece that counts, in characters.
const MIN_CHARS: usize = 8;
/// Fewest alphanumerics a counted line or literal needs (skips `# --------` rulers).
const MIN_ALNUM: usize = 4;

#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Probe source lines with every whitespace character removed.
    lines: Vec<String>,
    /// Literal pieces and their escaped forms, longest first.
    literals: Vec<String>,
}

impl Redactor {
    /// Builds a redactor from the probe files: `(path, text)` pairs.
    pub fn from_sources(sources: &[(String, String)]) -> Self {
        let mut lines = Vec::new();
        let mut literals = Vec::new();
        for (_path, text) in sources {
            for line in text.lines().map(str::trim) {
                if counts(line) && !GENERIC_LINES.contains(&line) {
                    lines.push(squeeze(line));
                }
            }
            for literal in python::string_literals(text) {
                for piece in literal_pieces(&literal) {
                    literals.extend(escaped_forms(piece));
                }
            }
        }
        for list in [&mut lines, &mut literals] {
            list.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
            list.dedup();
        }
        Redactor { lines, literals }
    }

    /// The same redactor less what `public` (the task's prompt, which every agent reads)
    /// already says: a probe line or literal that the prompt contains hides nothing, and
    /// blanking it would only make a message unreadable. Canaries are masked regardless.
    pub fn with_public(mut self, public: &str) -> Self {
        let squeezed = squeeze(public);
        self.lines.retain(|line| !squeezed.contains(line.as_str()));
        self.literals
            .retain(|literal| !public.contains(literal.as_str()));
        self
    }

    /// The text with every probe-reproducing line replaced and every literal and canary masked.
    pub fn redact(&self, text: &str) -> String {
        let lines: Vec<&str> = text
            .split('\n')
            .map(|line| {
                if self.reproduces_source(line) {
                    LINE_MARKER
                } else {
                    line
                }
            })
            .collect();
        self.mask(&lines.join("\n"))
    }

    pub fn redact_evidence(&self, evidence: &mut TestEvidence) {
        for field in [&mut evidence.message, &mut evidence.exception]
            .into_iter()
            .flatten()
        {
            *field = self.redact(field);
        }
    }

    /// Every message and the reason of a grade.
    /// The grade's reason is left alone: it is composed by the grader from categories and
    /// counts, never from sandbox text.
    pub fn redact_grade(&self, grade: &mut Grade) {
        for test in &mut grade.tests {
            self.redact_evidence(&mut test.evidence);
        }
    }

    /// Every free text of a report that a run could have influenced. Probe requirement texts
    /// are left alone: task authors write them to be shown.
    pub fn redact_report(&self, report: &mut Report) {
        self.redact_grade(&mut report.grade);
        let phases = report.phases.iter_mut().map(|p| &mut p.evidence);
        let phase_texts = phases.flat_map(|e| [&mut e.infra_error, &mut e.inconsistent]);
        for text in phase_texts.chain([&mut report.apply_error]).flatten() {
            *text = self.redact(text);
        }
    }

    /// Whether a line of output contains a probe source line, literally or escaped.
    fn reproduces_source(&self, line: &str) -> bool {
        if self.lines.is_empty() {
            return false;
        }
        let once = unescape(line);
        let twice = unescape(&once);
        [line, &once, &twice].into_iter().any(|view| {
            let view = squeeze(view);
            self.lines
                .iter()
                .any(|needle| view.contains(needle.as_str()))
        })
    }

    fn mask(&self, text: &str) -> String {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for needle in &self.literals {
            ranges.extend(
                text.match_indices(needle.as_str())
                    .map(|(i, m)| (i, i + m.len())),
            );
        }
        for canary in CANARIES {
            ranges.extend(
                text.match_indices(canary)
                    .map(|(i, m)| token_around(text, i, i + m.len())),
            );
        }
        ranges.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut done = 0;
        for (start, end) in ranges {
            if end <= done {
                continue;
            }
            if start >= done {
                out.push_str(&text[done..start]);
                out.push_str(MASK);
            }
            done = end;
        }
        out.push_str(&text[done..]);
        out
    }
}

/// Long enough and wordy enough to be worth matching.
fn counts(text: &str) -> bool {
    text.chars().count() >= MIN_CHARS
        && text.chars().filter(|c| c.is_alphanumeric()).count() >= MIN_ALNUM
}

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// One level of Python / JSON string escapes, as `repr()` and `json.dumps` write them.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(q @ ('\\' | '\'' | '"')) => out.push(q),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// The parts of a literal's value that survive formatting: each line, split at `{...}` and
/// `%s`-style placeholders, trimmed, kept when long and wordy enough.
fn literal_pieces(value: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let whole = value.trim();
    if counts(whole) && !GENERIC_LITERALS.contains(&whole) {
        pieces.push(whole);
    }
    for line in value.lines() {
        pieces.extend(
            split_placeholders(line)
                .into_iter()
                .map(str::trim)
                .filter(|p| counts(p) && !GENERIC_LITERALS.contains(p)),
        );
    }
    pieces
}

/// Splits at `{...}` and at `%` followed by a conversion (`%s`, `%.3f`, `%(name)r`).
fn split_placeholders(line: &str) -> Vec<&str> {
    let bytes = line.as_bytes();
    let (mut pieces, mut start, mut i) = (Vec::new(), 0, 0);
    while i < bytes.len() {
        let end = match bytes[i] {
            b'{' => line[i..].find('}').map(|j| i + j + 1),
            b'%' => {
                let spec = line[i + 1..].find(|c: char| c.is_ascii_alphabetic() || c == '%');
                spec.map(|j| i + 1 + j + 1)
            }
            _ => None,
        };
        match end {
            Some(end) => {
                pieces.push(&line[start..i]);
                start = end;
                i = end;
            }
            None => i += 1,
        }
    }
    pieces.push(&line[start..]);
    pieces
}

/// A literal piece as it may appear in output: raw, or escaped by `repr()` or JSON.
fn escaped_forms(piece: &str) -> Vec<String> {
    let escaped = piece.replace('\\', "\\\\").replace('\t', "\\t");
    let mut forms = vec![
        piece.to_owned(),
        escaped.replace('\'', "\\'"),
        escaped.replace('"', "\\\""),
        escaped,
    ];
    forms.sort();
    forms.dedup();
    forms
}

/// The token (maximal run of non-space, non-delimiter characters) around `start..end`.
fn token_around(text: &str, start: usize, end: usize) -> (usize, usize) {
    let in_token = |c: char| !c.is_whitespace() && !"'\"`()[]{}<>,;\\".contains(c);
    let left = text[..start]
        .char_indices()
        .rev()
        .take_while(|&(_, c)| in_token(c))
        .last();
    let right = text[end..].char_indices().find(|&(_, c)| !in_token(c));
    let start = left.map_or(start, |(i, _)| i);
    let end = right.map_or(text.len(), |(i, _)| end + i);
    (start, end)
}

mod python;

#[cfg(test)]
mod tests;
