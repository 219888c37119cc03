//! Everything that talks to GitHub: the App JWT, installation tokens, every REST call (checks,
//! comments, pulls, Actions workflow runs), and the retry classification of their failures. The
//! only module that names octocrab or jsonwebtoken.

mod actions;
mod app;
mod body;
mod client;
mod error;
mod transport;
mod types;

pub use actions::MAX_DISPATCH_INPUTS;
pub use app::{GitHubApp, TOKEN_REFRESH_MARGIN};
pub use client::RepoClient;
pub use error::{
    GitHubError, Retry, RetryPolicy, SECONDARY_RATE_LIMIT_WAIT, SERVER_ERROR_WAIT, jitter,
};
pub use transport::API_VERSION;
pub use types::{
    Annotation, AnnotationLevel, CheckAction, CheckOutput, CheckRunCreate, CheckRunSummary,
    CheckRunUpdate, Conclusion, FailedDelivery, MAX_ANNOTATION_MESSAGE_BYTES,
    MAX_ANNOTATION_TITLE_CHARS, MAX_ANNOTATIONS_PER_REQUEST, MAX_COMMENT_CHARS, MAX_OUTPUT_CHARS,
    PullSummary, Status, WorkflowRunSummary,
};
