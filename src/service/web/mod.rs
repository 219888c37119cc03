//! The App's web pages, rendered on the server (pure: values in, HTML out): the grade page of
//! a job, the operator dashboard with its SVG charts, and the login form. No scripts, no
//! external resources; every string that is not a literal of ours is escaped by
//! [`html::Html::text`]. The handlers that read the store and check credentials are in
//! `server/pages.rs`.

mod dashboard;
mod grade;
pub mod html;
pub mod svg;

pub use dashboard::{Dashboard, QueueRow, RecentGrade, render_dashboard};
pub use grade::{GradePage, HistoryRow, render_grade_page, reproduce_commands};

use html::{Html, page};

/// The operator login form (`POST /login`); `next` is where to go after it, `failed` says
/// the last token was wrong.
pub fn render_login(next: &str, failed: bool) -> String {
    let mut h = Html::new();
    h.raw("<h1>Operator login</h1>");
    if failed {
        h.raw("<p class=\"note\">That token is not the operator token.</p>");
    }
    h.raw("<form method=\"post\" action=\"/login\"><input type=\"hidden\" name=\"next\" value=\"")
        .text(next)
        .raw(
            "\"><label>Operator token <input type=\"password\" name=\"token\" \
              autocomplete=\"current-password\"></label><input type=\"submit\" value=\"Log in\">\
              </form>",
        );
    page("InfraDev login", &h)
}

#[cfg(test)]
mod tests;
