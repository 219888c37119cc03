//! `/infradev` commands in PR comments (pure).
//!
//! A command is `/infradev <sub-command>` at the start of a line of the rendered comment: the
//! first text of a paragraph, heading or list item, or the text right after a line break. Like
//! rust-lang/bors, the comment is parsed as Markdown (pulldown-cmark) and anything inside code
//! (fenced or indented blocks, inline code), block quotes or HTML is not a command, so quoting
//! someone's command or showing one in an example does nothing.

use std::fmt;
use std::ops::Range;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use serde::Serialize;

/// The word that starts every command.
pub const PREFIX: &str = "/infradev";

/// A sub-command of `/infradev`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Command {
    /// `/infradev grade`: grade this PR (also a human one) now and on every new head.
    Grade,
    /// `/infradev regrade`: grade the current head again, as a new attempt.
    Regrade,
    /// `/infradev cancel`: cancel this PR's queued and running grades.
    Cancel,
    /// `/infradev help`: reply with the commands (anyone may ask).
    Help,
}

impl Command {
    /// Every command, for help texts.
    pub const ALL: [Command; 4] = [
        Command::Grade,
        Command::Regrade,
        Command::Cancel,
        Command::Help,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Grade => "grade",
            Command::Regrade => "regrade",
            Command::Cancel => "cancel",
            Command::Help => "help",
        }
    }

    /// What the command does, for the help reply.
    pub fn describe(self) -> &'static str {
        match self {
            Command::Grade => {
                "grade this pull request now and on every new head, also when no agent wrote it"
            }
            Command::Regrade => "grade the current head again, as a new attempt",
            Command::Cancel => "cancel this pull request's queued and running grades",
            Command::Help => "list the commands (anyone may ask)",
        }
    }

    fn from_word(word: &str) -> Option<Command> {
        Command::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(word))
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX} {}", self.as_str())
    }
}

/// A line that starts with `/infradev` but is not a command we know. Its message is safe to
/// post back: words from the comment are shown as inline code, shortened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
pub enum CommandError {
    #[error("`/infradev` needs a sub-command: grade, regrade, cancel or help")]
    Missing,
    #[error("unknown sub-command {}: expected grade, regrade, cancel or help", code_span(.0))]
    Unknown(String),
    #[error("`{command}` takes no arguments, but got {}", code_span(.arguments))]
    UnexpectedArguments { command: Command, arguments: String },
}

/// Every `/infradev` line of `body` outside code and quotes, in order: a command, or why the
/// line is not one. Both `/infradev` and the sub-command are matched case-insensitively.
pub fn parse_commands(body: &str) -> Vec<Result<Command, CommandError>> {
    line_starts(body)
        .into_iter()
        .filter_map(|start| parse_line(rest_of_line(body, start)))
        .collect()
}

/// Whether a GitHub repository permission (`admin`, `maintain`, `write`, `triage`, `read`,
/// `none`: the `permission` or `role_name` of "get repository permissions for a user") may
/// run commands.
pub fn permits(permission: &str) -> bool {
    ["write", "maintain", "admin"]
        .iter()
        .any(|p| p.eq_ignore_ascii_case(permission.trim()))
}

/// One command line (from `/infradev` to the end of the line), or `None` if it does not start
/// with the `/infradev` word.
fn parse_line(line: &str) -> Option<Result<Command, CommandError>> {
    let mut words = line.split_whitespace();
    if !words.next()?.eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    let Some(word) = words.next() else {
        return Some(Err(CommandError::Missing));
    };
    let Some(command) = Command::from_word(word) else {
        return Some(Err(CommandError::Unknown(word.to_owned())));
    };
    let arguments: Vec<&str> = words.collect();
    if !arguments.is_empty() {
        return Some(Err(CommandError::UnexpectedArguments {
            command,
            arguments: arguments.join(" "),
        }));
    }
    Some(Ok(command))
}

/// Byte offsets in `body` where rendered text starts a line outside code, quotes and HTML.
fn line_starts(body: &str) -> Vec<usize> {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut starts = Vec::new();
    // Depth inside block quotes, code blocks and HTML blocks: nothing in there counts.
    let mut hidden = 0usize;
    // Whether the next text event begins a line.
    let mut at_line_start = false;
    for (event, range) in Parser::new_ext(body, options).into_offset_iter() {
        let Range { start, .. } = range;
        match event {
            Event::Start(Tag::BlockQuote(_) | Tag::CodeBlock(_) | Tag::HtmlBlock) => {
                hidden += 1;
                at_line_start = false;
            }
            Event::End(TagEnd::BlockQuote(_) | TagEnd::CodeBlock | TagEnd::HtmlBlock) => {
                hidden = hidden.saturating_sub(1);
                at_line_start = false;
            }
            Event::Start(Tag::Paragraph | Tag::Heading { .. } | Tag::Item)
            | Event::SoftBreak
            | Event::HardBreak => {
                at_line_start = true;
            }
            Event::Text(_) => {
                if at_line_start && hidden == 0 {
                    starts.push(start);
                }
                at_line_start = false;
            }
            _ => at_line_start = false,
        }
    }
    starts
}

/// `body` from `start` to the end of its line, without the line break.
fn rest_of_line(body: &str, start: usize) -> &str {
    let rest = &body[start..];
    let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
    &rest[..end]
}

/// `text` as Markdown inline code that cannot be broken out of, shortened to 40 characters.
/// For echoing words from a comment back to GitHub without rendering them (no mentions, no
/// links, no commands).
pub fn code_span(text: &str) -> String {
    const MAX: usize = 40;
    let mut shown: String = text.chars().filter(|c| !c.is_control()).take(MAX).collect();
    if text.chars().count() > MAX {
        shown.push('…');
    }
    // A code span is closed by a backtick run of the same length as the opening one, so open
    // with one longer than any run inside; pad with spaces so that edge backticks survive.
    let longest = shown.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    if shown.starts_with('`') || shown.ends_with('`') || shown.is_empty() {
        format!("{fence} {shown} {fence}")
    } else {
        format!("{fence}{shown}{fence}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Command::*;

    type Parsed = Vec<Result<Command, CommandError>>;

    fn unknown(word: &str) -> Result<Command, CommandError> {
        Err(CommandError::Unknown(word.into()))
    }

    #[test]
    fn commands_table() {
        let cases: Vec<(&str, &str, Parsed)> = vec![
            ("empty", "", vec![]),
            ("no command", "LGTM, thanks!", vec![]),
            ("grade", "/infradev grade", vec![Ok(Grade)]),
            ("regrade", "/infradev regrade\n", vec![Ok(Regrade)]),
            ("cancel", "/infradev cancel", vec![Ok(Cancel)]),
            ("help", "/infradev help", vec![Ok(Help)]),
            ("any case", "/InfraDev GRADE", vec![Ok(Grade)]),
            ("trailing spaces", "/infradev grade   ", vec![Ok(Grade)]),
            (
                "leading spaces (< 4)",
                "   /infradev grade",
                vec![Ok(Grade)],
            ),
            ("tab between words", "/infradev\tcancel", vec![Ok(Cancel)]),
            (
                "after text lines",
                "Looks wrong.\n/infradev regrade\nthanks",
                vec![Ok(Regrade)],
            ),
            (
                "hard break",
                "Looks wrong.  \n/infradev regrade",
                vec![Ok(Regrade)],
            ),
            (
                "CRLF",
                "please\r\n/infradev grade\r\n/infradev cancel\r\n",
                vec![Ok(Grade), Ok(Cancel)],
            ),
            (
                "multiple",
                "/infradev grade\n\n/infradev regrade\n/infradev cancel",
                vec![Ok(Grade), Ok(Regrade), Ok(Cancel)],
            ),
            ("heading", "# /infradev grade", vec![Ok(Grade)]),
            (
                "list item",
                "- /infradev grade\n- /infradev cancel",
                vec![Ok(Grade), Ok(Cancel)],
            ),
            (
                "mid-line is not a command",
                "please /infradev grade",
                vec![],
            ),
            ("word must end", "/infradevgrade", vec![]),
            ("not the prefix", "/infra grade", vec![]),
            (
                "missing sub-command",
                "/infradev",
                vec![Err(CommandError::Missing)],
            ),
            (
                "unknown sub-command",
                "/infradev merge",
                vec![unknown("merge")],
            ),
            (
                "arguments",
                "/infradev grade now please",
                vec![Err(CommandError::UnexpectedArguments {
                    command: Grade,
                    arguments: "now please".into(),
                })],
            ),
            ("fenced code", "```\n/infradev grade\n```", vec![]),
            (
                "tilde fence",
                "~~~sh\n/infradev grade\n~~~\n/infradev cancel",
                vec![Ok(Cancel)],
            ),
            ("indented code", "text\n\n    /infradev grade\n", vec![]),
            ("inline code", "`/infradev grade`", vec![]),
            ("inline code then text", "`x` /infradev grade", vec![]),
            ("block quote", "> /infradev grade", vec![]),
            ("nested quote in list", "- > /infradev grade", vec![]),
            (
                "quote then command",
                "> /infradev cancel\n\n/infradev grade",
                vec![Ok(Grade)],
            ),
            ("html comment", "<!--\n/infradev grade\n-->", vec![]),
            (
                "html block",
                "<details>\n\n/infradev grade\n\n</details>",
                vec![Ok(Grade)],
            ),
            ("emphasis is not plain text", "*/infradev grade*", vec![]),
            ("link", "[/infradev grade](https://example.com)", vec![]),
            (
                "code fence inside list",
                "- ```\n  /infradev grade\n  ```",
                vec![],
            ),
            (
                "unterminated fence hides the rest",
                "```\n/infradev grade",
                vec![],
            ),
            (
                "unicode before",
                "✅ done\n/infradev regrade",
                vec![Ok(Regrade)],
            ),
        ];
        for (name, body, want) in cases {
            assert_eq!(parse_commands(body), want, "{name}: {body:?}");
        }
    }

    #[test]
    fn permissions() {
        for (permission, want) in [
            ("admin", true),
            ("maintain", true),
            ("write", true),
            ("Write", true),
            ("triage", false),
            ("read", false),
            ("none", false),
            ("", false),
        ] {
            assert_eq!(permits(permission), want, "{permission}");
        }
    }

    #[test]
    fn error_messages_are_safe_to_post() {
        let cases = [
            (
                CommandError::Missing,
                "`/infradev` needs a sub-command: grade, regrade, cancel or help",
            ),
            (
                CommandError::Unknown("merge".into()),
                "unknown sub-command `merge`: expected grade, regrade, cancel or help",
            ),
            (
                CommandError::Unknown("a`b".into()),
                "unknown sub-command ``a`b``: expected grade, regrade, cancel or help",
            ),
            (
                CommandError::Unknown("`@x`".into()),
                "unknown sub-command `` `@x` ``: expected grade, regrade, cancel or help",
            ),
            (
                CommandError::UnexpectedArguments {
                    command: Command::Grade,
                    arguments: "x".repeat(50),
                },
                "`/infradev grade` takes no arguments, but got `xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…`",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.to_string(), want);
        }
        // An error message posted back contains no command itself.
        let posted = CommandError::Unknown("grade".into()).to_string();
        assert!(parse_commands(&posted).is_empty());
    }
}
