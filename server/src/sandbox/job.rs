//! What the sandbox does: one job in, one reply out, the same code in the
//! helper process and (where no helper can be started) on a blocking
//! thread.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::template::RenderJob;
use crate::model::tokenizer::{TokenizerError, Vocabulary};

/// One piece of untrusted input to work on.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Job {
    /// Render a model's chat template.
    Render(RenderJob),
    /// Read a `tokenizer.json` as the constraint engine will: its bounds
    /// and whether the engine can use it.
    Tokenizer(PathBuf),
}

/// What a job gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The prompt a template rendered.
    Rendered(String),
    /// A tokenizer within the bounds that the engine reads: its tokens.
    Tokens(usize),
    /// The job failed on its input (what the template raised, a tokenizer
    /// the engine cannot read), in words for the client.
    Failed(String),
    /// The input breaks a bound (a hostile or damaged tokenizer).
    OutOfBounds(String),
}

impl Job {
    /// Does the job. Never panics: a panic of the code it runs is a
    /// failure of the job.
    pub fn run(&self) -> Reply {
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match self {
            Self::Render(job) => match job.run() {
                Ok(prompt) => Reply::Rendered(prompt),
                Err(why) => Reply::Failed(why),
            },
            Self::Tokenizer(path) => tokenizer(path),
        }));
        ran.unwrap_or_else(|_| {
            Reply::Failed(match self {
                Self::Render(_) => "the model's chat template could not be rendered".into(),
                Self::Tokenizer(_) => "the tokenizer could not be read".into(),
            })
        })
    }
}

fn tokenizer(path: &std::path::Path) -> Reply {
    let text = match crate::backend::vocabularies::read_file(path) {
        Ok(text) => text,
        Err(e) => return Reply::OutOfBounds(e.to_string()),
    };
    match Vocabulary::parse_checked(&text) {
        Ok(vocabulary) => Reply::Tokens(vocabulary.len()),
        Err(TokenizerError::Bounds(why)) => Reply::OutOfBounds(why),
        Err(TokenizerError::Unsupported(why)) => Reply::Failed(why),
    }
}
