"""JSON schemas made from a seed, and the check that an answer is valid.

`generate(seed)` makes an object schema from a fixed random sequence:
nested objects, arrays with minItems/maxItems, enums, bounded integers and
numbers, optional fields, `additionalProperties: false`, `anyOf`,
nullable types, `$defs`/`$ref`, string patterns and formats. The same seed
always gives the same schema, so a failure names its seed. `features(schema)`
says which of those a schema uses (the tests check that their seeds cover
them all). `strict(schema)` is the form OpenAI's strict mode asks for.

`validate(answer, schema)` parses and validates with `jsonschema`, formats
included: date, time, date-time, uuid, ipv4, ipv6 and hostname are each
checked here, so that none passes unchecked for want of an optional
package."""

import calendar
import copy
import json
import random
import re
import uuid

import jsonschema

# String formats the engine writes; the mock writes a short valid instance
# of each. (email, uri and duration are also followed by the engine: see
# test_structured_output.py for what the mock makes of them.)
FORMATS = ["date", "time", "date-time", "uuid", "ipv4", "ipv6", "hostname"]
# Patterns whose repetition, if any, ends the string.
PATTERNS = [
    r"^[A-Z]{3}-[0-9]{2}$",
    r"^(foo|bar)-[0-9]{1,3}$",
    r"^\d{4}$",
    r"^[a-z]{2,5}$",
    r"^#[0-9a-f]{6}$",
]
NAMES = ["id", "name", "kind", "size", "price", "tags", "owner", "items", "when", "note", "level", "ok"]
WORDS = ["red", "green", "blue", "東京", "naïve café", "a b", "x\"y", "🦀"]

FEATURES = {
    "nested object", "array bounds", "enum", "integer bounds", "number bounds",
    "optional field", "additionalProperties false", "anyOf", "nullable", "ref",
    "pattern", "format", "const", "boolean",
}


class Generator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.defs: dict = {}

    def schema(self, depth: int) -> dict:
        kinds = ["string", "integer", "number", "boolean", "enum", "const"]
        if depth < 3:
            kinds += ["object", "array", "anyOf", "nullable"] * 2
        if depth < 3 and len(self.defs) < 2:
            kinds.append("ref")
        return getattr(self, "make_" + self.rng.choice(kinds).replace("Of", "_of"))(depth)

    def make_object(self, depth: int) -> dict:
        names = self.rng.sample(NAMES, self.rng.randint(1, 4))
        properties = {name: self.schema(depth + 1) for name in names}
        required = [name for name in names if self.rng.random() < 0.6]
        schema = {"type": "object", "properties": properties, "required": required}
        if self.rng.random() < 0.5:
            schema["additionalProperties"] = False
        return schema

    def make_array(self, depth: int) -> dict:
        low = self.rng.randint(0, 3)
        return {"type": "array", "items": self.schema(depth + 1), "minItems": low,
                "maxItems": low + self.rng.randint(0, 3)}

    def make_string(self, depth: int) -> dict:
        roll = self.rng.random()
        if roll < 0.3:
            return {"type": "string", "format": self.rng.choice(FORMATS)}
        if roll < 0.6:
            return {"type": "string", "pattern": self.rng.choice(PATTERNS)}
        low = self.rng.randint(0, 6)
        return {"type": "string", "minLength": low, "maxLength": low + self.rng.randint(0, 8)}

    def make_integer(self, depth: int) -> dict:
        low = self.rng.randint(-1000, 1000)
        return {"type": "integer", "minimum": low, "maximum": low + self.rng.randint(0, 500)}

    def make_number(self, depth: int) -> dict:
        low = round(self.rng.uniform(-100, 100), 2)
        schema = {"type": "number", "maximum": round(low + self.rng.uniform(0.5, 50), 2)}
        schema["exclusiveMinimum" if self.rng.random() < 0.3 else "minimum"] = low
        return schema

    def make_boolean(self, depth: int) -> dict:
        return {"type": "boolean"}

    def make_enum(self, depth: int) -> dict:
        if self.rng.random() < 0.7:
            return {"enum": self.rng.sample(WORDS, self.rng.randint(1, 4))}
        return {"enum": self.rng.sample([1, 2.5, -7, "one", None, True], self.rng.randint(2, 4))}

    def make_const(self, depth: int) -> dict:
        return {"const": self.rng.choice(WORDS + [42, False])}

    def make_any_of(self, depth: int) -> dict:
        return {"anyOf": [self.schema(depth + 1), self.schema(depth + 1)]}

    def make_nullable(self, depth: int) -> dict:
        base = self.rng.choice(["string", "integer", "boolean"])
        return {"type": [base, "null"]}

    def make_ref(self, depth: int) -> dict:
        name = f"Def{len(self.defs)}"
        self.defs[name] = {}
        self.defs[name] = self.make_object(depth + 1)
        return {"$ref": f"#/$defs/{name}"}


def generate(seed: int) -> dict:
    """An object schema made from `seed`."""
    gen = Generator(seed)
    schema = gen.make_object(0)
    # At least one required member, so that no answer is `{}` alone.
    if not schema["required"]:
        schema["required"] = [next(iter(schema["properties"]))]
    if gen.defs:
        schema["$defs"] = gen.defs
    return schema


def features(schema) -> set[str]:
    """What `schema` uses, of FEATURES."""
    found: set[str] = set()

    def walk(node, depth: int) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, depth)
            return
        if not isinstance(node, dict):
            return
        if node.get("type") == "object":
            if depth > 0:
                found.add("nested object")
            if set(node.get("properties", {})) - set(node.get("required", [])):
                found.add("optional field")
            if node.get("additionalProperties") is False:
                found.add("additionalProperties false")
        if "minItems" in node and "maxItems" in node:
            found.add("array bounds")
        if "enum" in node:
            found.add("enum")
        if node.get("type") == "integer" and "minimum" in node and "maximum" in node:
            found.add("integer bounds")
        if node.get("type") == "number" and "maximum" in node:
            found.add("number bounds")
        if isinstance(node.get("type"), list) and "null" in node["type"]:
            found.add("nullable")
        for key, feature in [("anyOf", "anyOf"), ("$ref", "ref"), ("pattern", "pattern"),
                             ("format", "format"), ("const", "const")]:
            if key in node:
                found.add(feature)
        if node.get("type") == "boolean":
            found.add("boolean")
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for child in value.values():
                    walk(child, depth + 1)
            elif key in ("items", "anyOf"):
                walk(value, depth + 1)

    walk(schema, 0)
    return found


def strict(schema: dict) -> dict:
    """OpenAI's strict form: every object lists all its properties as
    required and allows no others; an optional member may be null."""
    schema = copy.deepcopy(schema)

    def walk(node) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        for key in ("properties", "$defs"):
            for child in node.get(key, {}).values():
                walk(child)
        for key in ("items", "anyOf"):
            if key in node:
                walk(node[key])
        if node.get("type") == "object":
            required = set(node.get("required", []))
            for name, child in node["properties"].items():
                if name not in required:
                    node["properties"][name] = {"anyOf": [child, {"type": "null"}]}
            node["required"] = list(node["properties"])
            node["additionalProperties"] = False

    walk(schema)
    return schema


# ---------------------------------------------------------------- checking

FORMAT_CHECKER = jsonschema.FormatChecker()


def _checks(name: str):
    return FORMAT_CHECKER.checks(name, raises=(ValueError,))


@_checks("date")
def _date(value) -> bool:
    """RFC 3339 full-date: any four-digit year (0000 too, which Python's
    date cannot hold), a month, a day of that month."""
    if not isinstance(value, str):
        return True
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is None:
        return False
    year, month, day = (int(part) for part in value.split("-"))
    # The year 0 is a leap year, as 2000 is.
    return 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year or 2000, month)[1]


@_checks("time")
def _time(value) -> bool:
    """RFC 3339 full-time: hours, minutes, seconds (60 for a leap second),
    an optional fraction, then Z or an offset of hours and minutes."""
    if not isinstance(value, str):
        return True
    match = re.fullmatch(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([zZ]|[+-](\d{2}):(\d{2}))", value)
    if match is None:
        return False
    hour, minute, second = int(match[1]), int(match[2]), int(match[3])
    offset_ok = match[6] is None or (int(match[6]) < 24 and int(match[7]) < 60)
    return hour < 24 and minute < 60 and second < 61 and offset_ok


@_checks("date-time")
def _date_time(value) -> bool:
    if not isinstance(value, str):
        return True
    match = re.fullmatch(r"(\d{4}-\d{2}-\d{2})[tT ](.*)", value)
    return match is not None and _date(match[1]) and _time(match[2])


@_checks("uuid")
def _uuid(value) -> bool:
    return not isinstance(value, str) or (len(value) == 36 and bool(uuid.UUID(value)))


@_checks("hostname")
def _hostname(value) -> bool:
    label = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    return not isinstance(value, str) or (
        len(value) <= 253 and re.fullmatch(rf"{label}(\.{label})*\.?", value) is not None)


def validate(answer: str, schema) -> object:
    """Parses `answer` and validates it against `schema` (formats
    included); returns the value. Fails the test with the answer when
    either fails."""
    try:
        value = json.loads(answer)
    except json.JSONDecodeError as error:
        raise AssertionError(f"not JSON ({error}): {answer!r}") from None
    validator = jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(value)]
    assert not errors, f"{answer!r} fails its schema {json.dumps(schema)}: {errors}"
    return value
