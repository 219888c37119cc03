//! Manifest errors that name the file, the line and the field.

use std::ops::Range;
use std::path::{Path, PathBuf};

/// A problem in a task or probe manifest, located precisely enough to fix without searching.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}:{column}: {}{message}", file.display(), field.as_deref().map(|f| format!("field `{f}`: ")).unwrap_or_default())]
pub struct ManifestError {
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The dotted field path (`resources.timeouts.tests_s`), when one is to blame.
    pub field: Option<String>,
    pub message: String,
}

impl ManifestError {
    /// An error at a byte span of `text`.
    pub fn at(
        file: &Path,
        text: &str,
        span: Range<usize>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        let (line, column) = line_col(text, span.start);
        ManifestError {
            file: file.to_path_buf(),
            line,
            column,
            field: field.map(str::to_owned),
            message: message.into(),
        }
    }

    /// An error about the file as a whole (missing, unreadable).
    pub fn whole_file(file: &Path, message: impl Into<String>) -> Self {
        ManifestError {
            file: file.to_path_buf(),
            line: 1,
            column: 1,
            field: None,
            message: message.into(),
        }
    }

    /// Turns a TOML/serde error into one that names the field: serde says which field is
    /// unknown or missing; for a bad value we read the key off the line the span points at.
    pub fn from_toml(file: &Path, text: &str, err: &toml::de::Error) -> Self {
        let message = err.message().trim().to_owned();
        let span = err.span().unwrap_or(0..0);
        let field = backticked_after(&message, "unknown field ")
            .or_else(|| backticked_after(&message, "missing field "))
            .or_else(|| key_on_line(text, span.start));
        ManifestError::at(file, text, span, field.as_deref(), message)
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn backticked_after(message: &str, prefix: &str) -> Option<String> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    let rest = rest.strip_prefix('`')?;
    Some(rest[..rest.find('`')?].to_owned())
}

fn key_on_line(text: &str, offset: usize) -> Option<String> {
    let start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let text = "a = 1\nbb = 2\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        assert_eq!(line_col(text, 11), (2, 6));
    }

    #[test]
    fn display_names_file_line_and_field() {
        let e = ManifestError::at(
            Path::new("tasks/x/task.toml"),
            "id = 1\npr = 'x'\n",
            12..15,
            Some("pr"),
            "invalid type",
        );
        assert_eq!(
            e.to_string(),
            "tasks/x/task.toml:2:6: field `pr`: invalid type"
        );
    }
}
