//! Text helpers: a Markdown document under a size limit, and safe spans of untrusted text.

use std::fmt::Write;

use super::*;

/// A Markdown document that stays under a limit: whole blocks are appended while they fit,
/// the rest are counted and named in a closing note.
pub(super) struct Doc {
    out: String,
    limit: usize,
    omitted: usize,
    /// The truncation note is written.
    closed: bool,
}

impl Doc {
    pub(super) fn new(limit: usize) -> Self {
        Doc {
            out: String::new(),
            limit,
            omitted: 0,
            closed: false,
        }
    }

    pub(super) fn push(&mut self, block: &str) {
        if self.closed {
            return;
        }
        if self.omitted > 0 || self.out.len() + block.len() > self.limit - RESERVE {
            self.omitted += 1;
        } else {
            self.out.push_str(block);
        }
    }

    /// Appends a short block that must be there (a closing tag, a footer): it uses the
    /// reserve.
    pub(super) fn force(&mut self, block: &str) {
        self.out.push_str(block);
    }

    /// Appends the truncation note, if anything was left out; later blocks are dropped.
    pub(super) fn close(&mut self, what: &str) {
        if self.omitted > 0 && !self.closed {
            let _ = write!(
                self.out,
                "\n_Truncated: {} more {what}(s) not shown, to stay within GitHub's limit of \
                 {} characters._\n\n",
                self.omitted, self.limit
            );
        }
        self.closed = true;
    }

    pub(super) fn finish(mut self, what: &str) -> String {
        self.close(what);
        if self.out.len() > self.limit {
            // Only reachable if forced blocks outgrew the reserve; never split a character.
            let mut end = self.limit;
            while !self.out.is_char_boundary(end) {
                end -= 1;
            }
            self.out.truncate(end);
        }
        self.out
    }
}

/// The first non-blank line, without control characters, at most `max` characters, with the
/// sticky marker defused.
pub(super) fn clean(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    clip(&line, max).replace(STICKY_MARKER, "<!-- (marker) -->")
}

/// `text` cut to at most `max` characters, ending in an ellipsis when cut.
pub(super) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A one-line Markdown code span of untrusted text: shown literally, never rendered.
pub(super) fn code(text: &str, max: usize) -> String {
    let text = clean(text, max);
    if text.is_empty() {
        return "(empty)".to_owned();
    }
    let longest_run = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A commit id, plain (so GitHub links it) when it is hex, else as code.
pub(super) fn sha(commit: &str) -> String {
    let commit = commit.trim();
    if !commit.is_empty() && commit.chars().all(|c| c.is_ascii_hexdigit()) {
        short(commit).to_owned()
    } else {
        code(commit, 64)
    }
}

pub(super) fn short(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

/// A GitHub login: letters, digits, `-`, and the `[bot]` suffix; anything else dropped.
pub(super) fn login(user: &str) -> String {
    user.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '[' | ']'))
        .take(60)
        .collect()
}

pub(super) fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// "2 hidden probes", "1 official test", "3 tests and probes".
pub(super) fn tests_and_probes(tests: &[&GradedTest]) -> String {
    let official = tests.iter().filter(|t| t.expectation.is_official()).count();
    let n = tests.len();
    match (official, n - official) {
        (_, 0) => format!("{n} official {}", plural(n, "test", "tests")),
        (0, _) => format!("{n} hidden {}", plural(n, "probe", "probes")),
        _ => format!("{n} tests and probes"),
    }
}

/// "state 3, memory 1, time 1", in [`Category::ALL`] order.
pub(super) fn by_category(counts: &std::collections::BTreeMap<Category, usize>) -> String {
    let parts: Vec<String> = counts.iter().map(|(c, n)| format!("{c} {n}")).collect();
    parts.join(", ")
}
