//! Kubernetes label selectors: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`,
//! comma-separated, whitespace tolerant. A selector is a conjunction of requirements; the empty
//! selector matches everything.
//!
//! Used by `State::list` and by watch filters on the server; pure and deterministic (value sets
//! are `BTreeSet`s, so `Display` is canonical).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use crate::objects::validate::{validate_label_key, validate_label_value};
use crate::rejection::Rejection;

const FIELD: &str = "labelSelector";

/// One condition on one label key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `key` (the label is present).
    Exists(String),
    /// `!key` (the label is absent).
    DoesNotExist(String),
    /// `key=value` or `key==value`.
    Equals(String, String),
    /// `key!=value`: absent, or present with another value (as in Kubernetes).
    NotEquals(String, String),
    /// `key in (v1,v2)`: present with one of the values.
    In(String, BTreeSet<String>),
    /// `key notin (v1,v2)`: absent, or present with none of the values.
    NotIn(String, BTreeSet<String>),
}

impl Requirement {
    /// Whether a label set satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, set) => labels.get(k).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => !labels.get(k).is_some_and(|v| set.contains(v)),
        }
    }
}

/// A parsed label selector: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    /// In the order written; an empty list matches everything.
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Parses the Kubernetes selector syntax; `""` (or only whitespace) is `everything()`.
    pub fn parse(s: &str) -> Result<Selector, Rejection> {
        Parser { text: s, pos: 0 }.selector()
    }

    /// The selector that matches every label set.
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Builds a selector from requirements (keys and values are not re-validated).
    pub fn from_requirements(requirements: Vec<Requirement>) -> Selector {
        Selector { requirements }
    }

    /// The requirements, in the order written.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True for the selector that matches everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether a label set satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl FromStr for Selector {
    type Err = Rejection;

    fn from_str(s: &str) -> Result<Selector, Rejection> {
        Selector::parse(s)
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `(,)` for the set holding only the empty value: `()` would not parse.
        let set = |s: &BTreeSet<String>| match s.iter().next() {
            Some(only) if only.is_empty() && s.len() == 1 => ",".to_string(),
            _ => s.iter().cloned().collect::<Vec<_>>().join(","),
        };
        match self {
            Requirement::Exists(k) => write!(f, "{k}"),
            Requirement::DoesNotExist(k) => write!(f, "!{k}"),
            Requirement::Equals(k, v) => write!(f, "{k}={v}"),
            Requirement::NotEquals(k, v) => write!(f, "{k}!={v}"),
            Requirement::In(k, s) => write!(f, "{k} in ({})", set(s)),
            Requirement::NotIn(k, s) => write!(f, "{k} notin ({})", set(s)),
        }
    }
}

/// The canonical text form, which parses back to an equal selector.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// A hand-written recursive-descent parser over the selector text; `pos` is a byte offset.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn selector(mut self) -> Result<Selector, Rejection> {
        let mut requirements = Vec::new();
        self.skip_ws();
        if self.peek().is_none() {
            return Ok(Selector::everything());
        }
        loop {
            requirements.push(self.requirement()?);
            self.skip_ws();
            match self.peek() {
                None => return Ok(Selector { requirements }),
                Some(',') => self.pos += 1,
                Some(_) => return Err(self.error("expected ',' or the end")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, Rejection> {
        self.skip_ws();
        if self.eat('!') {
            let key = self.key()?;
            return Ok(Requirement::DoesNotExist(key));
        }
        let key = self.key()?;
        self.skip_ws();
        match self.peek() {
            None | Some(',') => Ok(Requirement::Exists(key)),
            Some('=') => {
                self.pos += 1;
                self.eat('=');
                Ok(Requirement::Equals(key, self.value()?))
            }
            Some('!') => {
                self.pos += 1;
                if !self.eat('=') {
                    return Err(self.error("expected '=' after '!'"));
                }
                Ok(Requirement::NotEquals(key, self.value()?))
            }
            Some(c @ ('<' | '>')) => Err(self.error(&format!("operator '{c}' is not supported"))),
            Some(_) => {
                let at = self.pos;
                match self.word() {
                    "in" => Ok(Requirement::In(key, self.set("in")?)),
                    "notin" => Ok(Requirement::NotIn(key, self.set("notin")?)),
                    _ => {
                        self.pos = at;
                        Err(self
                            .error("expected an operator (=, ==, !=, in, notin), ',' or the end"))
                    }
                }
            }
        }
    }

    fn key(&mut self) -> Result<String, Rejection> {
        self.skip_ws();
        let at = self.pos;
        let key = self.word();
        if key.is_empty() {
            self.pos = at;
            return Err(self.error("expected a label key"));
        }
        validate_label_key(FIELD, key)
            .map_err(|e| prefix_rule(e, &format!("label key {key:?}")))?;
        Ok(key.to_string())
    }

    fn value(&mut self) -> Result<String, Rejection> {
        self.skip_ws();
        let value = self.word();
        validate_label_value(FIELD, value)
            .map_err(|e| prefix_rule(e, &format!("label value {value:?}")))?;
        Ok(value.to_string())
    }

    /// `( v1, v2, ... )`; empty elements are the empty value, as in Kubernetes.
    fn set(&mut self, op: &str) -> Result<BTreeSet<String>, Rejection> {
        self.skip_ws();
        if !self.eat('(') {
            return Err(self.error(&format!("expected '(' after '{op}'")));
        }
        self.skip_ws();
        if self.eat(')') {
            return Err(self.error(&format!("the values of '{op}' must not be empty")));
        }
        let mut values = BTreeSet::new();
        loop {
            values.insert(self.value()?);
            self.skip_ws();
            if self.eat(')') {
                return Ok(values);
            }
            if !self.eat(',') {
                return Err(self.error("expected ',' or ')'"));
            }
        }
    }

    /// The longest run of characters that are neither whitespace nor an operator character.
    fn word(&mut self) -> &str {
        let rest = &self.text[self.pos..];
        let len = rest
            .find(|c: char| c.is_whitespace() || "!=(),<>".contains(c))
            .unwrap_or(rest.len());
        self.pos += len;
        &rest[..len]
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.pos += c.len_utf8();
        }
        hit
    }

    fn skip_ws(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn error(&self, what: &str) -> Rejection {
        let found = match self.peek() {
            Some(c) => format!("found {c:?}"),
            None => "found the end".to_string(),
        };
        Rejection::Invalid {
            field: FIELD.to_string(),
            rule: format!(
                "{what} at position {} in {:?}, {found}",
                self.pos, self.text
            ),
        }
    }
}

fn prefix_rule(e: Rejection, what: &str) -> Rejection {
    match e {
        Rejection::Invalid { field, rule } => Rejection::Invalid {
            field,
            rule: format!("{what}: {rule}"),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matching_table() {
        let none = labels(&[]);
        let a = labels(&[("state", "in_queue"), ("tier", "db")]);
        let b = labels(&[("state", "succeeded")]);
        // (selector, matches none, matches a, matches b)
        let table = [
            ("", true, true, true),
            ("  ", true, true, true),
            ("state", false, true, true),
            ("!state", true, false, false),
            ("state=in_queue", false, true, false),
            ("state==in_queue", false, true, false),
            ("state != in_queue", true, false, true),
            ("state in (in_queue, succeeded)", false, true, true),
            ("state notin (in_queue)", true, false, true),
            ("state,tier", false, true, false),
            ("state, !tier", false, false, true),
            (" state = succeeded , !tier ", false, false, true),
            ("tier=", false, false, false),
            ("tier notin (,db)", true, false, true),
            ("example.com/x in (a)", false, false, false),
        ];
        for (text, n, wa, wb) in table {
            let s = Selector::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                (s.matches(&none), s.matches(&a), s.matches(&b)),
                (n, wa, wb),
                "{text}"
            );
        }
    }

    #[test]
    fn empty_value_equals_matches_empty_label() {
        let s = Selector::parse("a=").expect("parses");
        assert!(s.matches(&labels(&[("a", "")])));
        assert!(!s.matches(&labels(&[("a", "x")])));
    }

    #[test]
    fn rejections_are_precise() {
        let table = [
            ("a,", "expected a label key at position 2"),
            (",a", "expected a label key at position 0"),
            ("a b", "expected an operator"),
            ("a=b c", "expected ',' or the end at position 4"),
            ("a in x", "expected '(' after 'in'"),
            ("a in ()", "the values of 'in' must not be empty"),
            ("a notin (x y)", "expected ',' or ')'"),
            ("a in (x", "expected ',' or ')' at position 7"),
            ("a ! b", "expected '=' after '!'"),
            ("a > 1", "operator '>' is not supported"),
            ("-a", "label key \"-a\""),
            ("a=b!", "expected ',' or the end"),
            ("a=-b", "label value \"-b\""),
            ("!", "expected a label key"),
        ];
        for (text, want) in table {
            match Selector::parse(text) {
                Err(Rejection::Invalid { field, rule }) => {
                    assert_eq!(field, "labelSelector", "{text}");
                    assert!(rule.contains(want), "{text}: {rule}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "a",
            "!a",
            "a=b",
            "a!=b",
            "a in (y,x)",
            "a notin (,x)",
            "a in (,)",
            "a=",
            "x/a=1,b in (c)",
        ] {
            let s: Selector = text.parse().expect("parses");
            let again = Selector::parse(&s.to_string()).expect("reparses");
            assert_eq!(again, s, "{text} -> {s}");
        }
        assert_eq!(
            Selector::parse("a in (y, x)").expect("parses").to_string(),
            "a in (x,y)"
        );
    }

    #[test]
    fn everything_is_empty() {
        assert!(Selector::everything().is_everything());
        assert_eq!(
            Selector::parse(" ").expect("parses"),
            Selector::everything()
        );
        assert_eq!(Selector::everything().to_string(), "");
    }
}
