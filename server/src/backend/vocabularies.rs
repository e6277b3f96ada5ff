//! Models' vocabularies and encoders as the server and its runners load
//! them: the
//! `tokenizer.json` file read (a regular file only, never waited on, at
//! most [`MAX_TOKENIZER_BYTES`]) and parsed within the bounds of a
//! tokenizer (`model::tokenizer`), once per process and source while in
//! use, and shared; a file that changes (a model pulled again with another
//! tokenizer) is read again.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::model::tokenizer::{
    Encoder, MAX_TOKENIZER_BYTES, MOCK_TOKENIZER, TokenizerSource, Vocabulary,
};

/// Encoders loaded in this process, by source (dropped with their last
/// user).
type LoadedEncoders = HashMap<TokenizerSource, (Option<Stamp>, Weak<Encoder>)>;
static ENCODERS: Mutex<Option<LoadedEncoders>> = Mutex::new(None);

/// The encoder of `source`, loaded once per process while in use (read
/// again when its file changed). Blocks while it loads.
///
/// # Errors
/// A file that cannot be read, or a tokenizer the library cannot read.
pub fn load_encoder(source: &TokenizerSource) -> Result<Arc<Encoder>, String> {
    let stamp = stamp(source);
    if let Some(loaded) = loaded_encoder(source, &stamp) {
        return Ok(loaded);
    }
    let text = match source {
        TokenizerSource::Mock => MOCK_TOKENIZER.to_owned(),
        TokenizerSource::File(path) => read_file(path)
            .map_err(|e| format!("cannot read the tokenizer {}: {e}", path.display()))?,
    };
    let encoder = Arc::new(Encoder::parse(&text).map_err(|e| e.to_string())?);
    ENCODERS
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(source.clone(), (stamp, Arc::downgrade(&encoder)));
    Ok(encoder)
}

/// The encoder of `source` when one is loaded from it as it is now (its
/// file unchanged); never reads the file, so it may be called where
/// blocking is not allowed (a `stat` at most).
pub fn cached_encoder(source: &TokenizerSource) -> Option<Arc<Encoder>> {
    loaded_encoder(source, &stamp(source))
}

fn loaded_encoder(source: &TokenizerSource, stamp: &Option<Stamp>) -> Option<Arc<Encoder>> {
    ENCODERS
        .lock()
        .as_ref()
        .and_then(|l| l.get(source))
        .filter(|(loaded_from, _)| loaded_from == stamp)
        .and_then(|(_, loaded)| loaded.upgrade())
}

/// The text of a `tokenizer.json` file: a regular file (never a FIFO or a
/// device, never waited on) of at most [`MAX_TOKENIZER_BYTES`].
///
/// # Errors
/// A file that cannot be read, is not a regular file, or is too large.
pub fn read_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    // Non-blocking, and a regular file only: a FIFO or a device at the
    // path is refused, never waited on or read without end.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    file.take(MAX_TOKENIZER_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_TOKENIZER_BYTES {
        return Err(std::io::Error::other(format!(
            "it is larger than {MAX_TOKENIZER_BYTES} bytes, more than any tokenizer.json"
        )));
    }
    Ok(text)
}

/// Vocabularies loaded in this process, by source, with the stamp of the
/// file each was read from (dropped with their last user).
type Loaded = HashMap<TokenizerSource, (Option<Stamp>, Weak<Vocabulary>)>;
static LOADED: Mutex<Option<Loaded>> = Mutex::new(None);

/// What tells a file's versions apart: its size and modification time.
type Stamp = (u64, Option<std::time::SystemTime>);

fn stamp(source: &TokenizerSource) -> Option<Stamp> {
    match source {
        TokenizerSource::Mock => None,
        TokenizerSource::File(path) => std::fs::metadata(path)
            .ok()
            .map(|m| (m.len(), m.modified().ok())),
    }
}

/// The vocabulary of `source`, loaded once per process while in use.
///
/// # Errors
/// A file that cannot be read, or is not a byte-level or byte-fallback
/// tokenizer.json.
pub fn load(source: &TokenizerSource) -> Result<Arc<Vocabulary>, String> {
    let stamp = stamp(source);
    if let Some(loaded) = LOADED
        .lock()
        .as_ref()
        .and_then(|l| l.get(source))
        .filter(|(loaded_from, _)| *loaded_from == stamp)
        .and_then(|(_, loaded)| loaded.upgrade())
    {
        return Ok(loaded);
    }
    let text = match source {
        TokenizerSource::Mock => MOCK_TOKENIZER.to_owned(),
        TokenizerSource::File(path) => read_file(path)
            .map_err(|e| format!("cannot read the tokenizer {}: {e}", path.display()))?,
    };
    let vocabulary = Arc::new(Vocabulary::parse(&text).map_err(|e| match source {
        TokenizerSource::Mock => e,
        TokenizerSource::File(path) => format!("the tokenizer {}: {e}", path.display()),
    })?);
    LOADED
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(source.clone(), (stamp, Arc::downgrade(&vocabulary)));
    Ok(vocabulary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vocabulary_is_loaded_once_while_in_use() {
        let vocabulary = load(&TokenizerSource::Mock).unwrap();
        assert_eq!(vocabulary.len(), 308);
        assert!(
            Arc::ptr_eq(&vocabulary, &load(&TokenizerSource::Mock).unwrap()),
            "loaded once while in use"
        );
    }
}
