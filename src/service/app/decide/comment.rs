//! `/infradev` commands in PR comments: parse them, reply to what cannot be read, and ask for
//! each command's permission check.

use super::{CommandRequest, Decided, Decision};
use crate::service::app::commands::{Command, parse_commands};
use crate::service::webhook::Repo;

pub(super) struct Comment<'a> {
    pub repo: &'a Repo,
    pub number: u64,
    pub comment_id: u64,
    pub user: &'a str,
    pub body: &'a str,
}

pub(super) fn on_comment(comment: &Comment<'_>, installation_id: Option<u64>) -> Decided {
    let parsed = parse_commands(comment.body);
    if parsed.is_empty() {
        return Decided::only(Decision::nothing("no /infradev command in the comment"));
    }
    let Some(installation_id) = installation_id else {
        return Decided::only(Decision::nothing("no App installation for this repository"));
    };
    let mut commands: Vec<Command> = Vec::new();
    let mut errors = Vec::new();
    for result in parsed {
        match result {
            Ok(command) if !commands.contains(&command) => commands.push(command),
            Ok(_) => {}
            Err(error) => errors.push(error.to_string()),
        }
    }
    let mut decisions = Vec::new();
    if !errors.is_empty() {
        let list: String = errors.iter().map(|e| format!("\n- {e}")).collect();
        let usage: Vec<String> = Command::ALL.iter().map(|c| format!("`{c}`")).collect();
        decisions.push(Decision::Reply {
            repo: comment.repo.clone(),
            number: comment.number,
            installation_id,
            message: format!(
                "@{} I did not understand:{list}\n\nCommands: {}.",
                comment.user,
                usage.join(", ")
            ),
        });
    }
    // Anyone may ask for help: no permission to look up.
    if let Some(at) = commands.iter().position(|c| *c == Command::Help) {
        commands.remove(at);
        decisions.push(Decision::React {
            repo: comment.repo.clone(),
            installation_id,
            comment_id: comment.comment_id,
            content: "+1".to_owned(),
        });
        decisions.push(Decision::Reply {
            repo: comment.repo.clone(),
            number: comment.number,
            installation_id,
            message: format!("@{} {}", comment.user, super::help_text()),
        });
    }
    decisions.extend(commands.into_iter().map(|command| {
        Decision::AskPermission(CommandRequest {
            repo: comment.repo.clone(),
            number: comment.number,
            installation_id,
            comment_id: comment.comment_id,
            user: comment.user.to_owned(),
            command,
        })
    }));
    Decided {
        pull: None,
        decisions,
        notes: Vec::new(),
    }
}
