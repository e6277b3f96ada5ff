//! Request bodies into an API's typed request: a field of the wrong type
//! is refused with the field's path (`tool_choice`, `messages[2].content`),
//! not with a column number; unknown fields are ignored, as the original
//! APIs do.

use super::error::ServiceError;

/// Parses `body` as `T`.
///
/// # Errors
/// [`ServiceError::Invalid`] naming the field (or `body` for JSON that
/// does not parse at all).
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ServiceError> {
    let mut json = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut json).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." || inner.is_syntax() || inner.is_eof() {
            ServiceError::invalid("body", format!("invalid request body: {inner}"))
        } else {
            // serde's message ends with " at line L column C": the field
            // says where.
            let message = inner.to_string();
            let message = message
                .rsplit_once(" at line ")
                .map_or(message.as_str(), |(m, _)| m);
            ServiceError::invalid(path.clone(), format!("`{path}`: {message}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Wire {
        seed: Option<i64>,
        items: Option<Vec<Item>>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Item {
        name: String,
    }

    #[test]
    fn a_type_error_names_its_field() {
        let err = parse_body::<Wire>(br#"{"seed": "x"}"#).unwrap_err();
        assert_eq!(err.field(), Some("seed"), "{err}");
        assert!(err.to_string().starts_with("`seed`: invalid type"), "{err}");
        let err = parse_body::<Wire>(br#"{"items": [{"name": "a"}, {"name": 5}]}"#).unwrap_err();
        assert_eq!(err.field(), Some("items[1].name"), "{err}");
        let err = parse_body::<Wire>(b"{nope").unwrap_err();
        assert_eq!(err.field(), Some("body"), "{err}");
        assert!(parse_body::<Wire>(br#"{"other": 1}"#).is_ok());
    }
}
