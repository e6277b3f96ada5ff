//! A tool's parameters made self-contained: its local references
//! (`{"$ref": "#/$defs/Name"}`, `#/definitions/…`) replaced by what they
//! point to. A forced tool call's grammar holds each tool's parameters
//! inside a larger schema, where a pointer from the parameters' own root
//! would point nowhere; pydantic writes every nested model that way.
//!
//! Invariant: the result admits the same values as the input. A
//! reference that leads back into itself (a recursive schema), one that
//! points outside the document or nowhere, and any reference past
//! [`MAX_INLINED`] are left as they are (the engine then refuses the
//! schema, naming the pointer).

use serde_json::{Map, Value};

/// References replaced at most per schema, so that a small schema whose
/// definitions refer to each other many times cannot grow without bound.
const MAX_INLINED: usize = 1000;

/// `schema` with its local references put in place.
pub(super) fn inline_local_refs(schema: &Value) -> Value {
    let mut inliner = Inliner {
        root: schema,
        open: Vec::new(),
        inlined: 0,
    };
    inliner.walk(schema)
}

struct Inliner<'a> {
    root: &'a Value,
    /// The references being expanded, outermost first: one met again is
    /// recursive.
    open: Vec<&'a str>,
    inlined: usize,
}

impl<'a> Inliner<'a> {
    fn walk(&mut self, node: &'a Value) -> Value {
        match node {
            Value::Object(map) => {
                if let Some(resolved) = self.resolve(map) {
                    return resolved;
                }
                Value::Object(
                    map.iter()
                        .map(|(key, value)| (key.clone(), self.walk(value)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(|item| self.walk(item)).collect()),
            other => other.clone(),
        }
    }

    /// The object `map` with its `$ref` replaced by the target (the
    /// target's keys, then `map`'s other keys over them); `None` when it
    /// has no reference this can follow.
    fn resolve(&mut self, map: &'a Map<String, Value>) -> Option<Value> {
        let pointer = map.get("$ref")?.as_str()?;
        let path = pointer.strip_prefix('#')?;
        if self.open.contains(&pointer) || self.inlined >= MAX_INLINED {
            return None;
        }
        let target = self.root.pointer(path)?;
        let Value::Object(target) = target else {
            return None;
        };
        self.inlined += 1;
        self.open.push(pointer);
        let mut resolved: Map<String, Value> = target
            .iter()
            .map(|(key, value)| (key.clone(), self.walk(value)))
            .collect();
        self.open.pop();
        for (key, value) in map {
            if key != "$ref" {
                let value = self.walk(value);
                resolved.insert(key.clone(), value);
            }
        }
        Some(Value::Object(resolved))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_nested_model_is_put_in_place_of_its_reference() {
        let schema = json!({
            "$defs": {
                "Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
                "Path": {"type": "array", "items": {"$ref": "#/$defs/Point"}}
            },
            "type": "object",
            "properties": {
                "at": {"$ref": "#/$defs/Point", "description": "where"},
                "route": {"$ref": "#/$defs/Path"},
                "old": {"$ref": "#/definitions/Old"}
            },
            "definitions": {"Old": {"type": "string"}}
        });
        let inlined = inline_local_refs(&schema);
        let point =
            json!({"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]});
        let mut described = point.clone();
        described["description"] = json!("where");
        assert_eq!(inlined["properties"]["at"], described);
        assert_eq!(
            inlined["properties"]["route"],
            json!({"type": "array", "items": point})
        );
        assert_eq!(inlined["properties"]["old"], json!({"type": "string"}));
        assert!(!inlined["properties"].to_string().contains("$ref"));
    }

    #[test]
    fn a_recursive_or_dangling_reference_is_left_as_it_is() {
        let schema = json!({
            "$defs": {"Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
            }}},
            "type": "object",
            "properties": {
                "tree": {"$ref": "#/$defs/Node"},
                "gone": {"$ref": "#/$defs/Missing"},
                "far": {"$ref": "https://example.com/schema"},
                "whole": {"$ref": "#"}
            }
        });
        let inlined = inline_local_refs(&schema);
        // One level put in place, the recursion kept as a reference.
        assert_eq!(
            inlined["properties"]["tree"]["properties"]["children"]["items"],
            json!({"$ref": "#/$defs/Node"})
        );
        assert_eq!(
            inlined["properties"]["gone"],
            json!({"$ref": "#/$defs/Missing"})
        );
        assert_eq!(
            inlined["properties"]["far"],
            json!({"$ref": "https://example.com/schema"})
        );
        // `#` is the root, which holds this reference: recursive.
        assert_eq!(
            inlined["properties"]["whole"]["properties"]["whole"],
            json!({"$ref": "#"})
        );
    }

    #[test]
    fn references_to_references_grow_no_further_than_the_bound() {
        // Each level refers to the one below twice: 2^20 copies if all
        // were put in place.
        let mut defs = Map::new();
        defs.insert("D0".into(), json!({"type": "integer"}));
        for level in 1..=20 {
            let below = format!("#/$defs/D{}", level - 1);
            defs.insert(
                format!("D{level}"),
                json!({"type": "array", "prefixItems": [{"$ref": below}, {"$ref": below}]}),
            );
        }
        let schema = json!({"$defs": defs, "$ref": "#/$defs/D20"});
        let inlined = inline_local_refs(&schema);
        assert!(inlined.to_string().len() < 1_000_000);
    }
}
