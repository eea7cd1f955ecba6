//! Which view a console address names (`View::parse`) and the address of a view (`View::href`):
//! the key its renders are shared under and what its stream is opened with.

use std::fmt::Write as _;

use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::state::Selector;

/// Longest path segment or query value a view takes (a DNS subdomain's length).
const SEGMENT_CHARS_MAX: usize = 253;

/// What one console address shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum View {
    Cluster,
    /// Every kind, with its count.
    Kinds,
    /// The objects of one kind, a page at a time.
    Objects {
        kind: String,
        namespace: String,
        selector: String,
        /// The page starts after this object (`namespace/name`).
        after: String,
    },
    /// One object's JSON.
    Object {
        kind: String,
        namespace: String,
        name: String,
    },
    Locks {
        prefix: String,
        after: String,
    },
    Operations,
    Pools,
    /// Every deployment's summary.
    Deployments,
    /// One deployment, by app and cluster.
    Deployment {
        namespace: String,
        name: String,
    },
    Reservations,
}

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ObjectsQuery {
    namespace: String,
    selector: String,
    after: String,
}

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct LocksQuery {
    prefix: String,
    after: String,
}

/// 404 or 400 with one line naming what is wrong.
pub struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, format!("{}\n", self.1)).into_response()
    }
}

fn bad(what: String) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, what)
}

fn query<T: Default + serde::de::DeserializeOwned>(q: &str) -> Result<T, Refusal> {
    if q.is_empty() {
        return Ok(T::default());
    }
    serde_urlencoded::from_str(q).map_err(|e| bad(format!("query: {e}")))
}

fn segment(field: &str, s: &str) -> Result<String, Refusal> {
    if s.is_empty() || s.chars().count() > SEGMENT_CHARS_MAX {
        return Err(bad(format!(
            "{field}: must be 1 to {SEGMENT_CHARS_MAX} characters"
        )));
    }
    Ok(s.to_string())
}

fn within(field: &str, s: String) -> Result<String, Refusal> {
    match s.chars().count() > SEGMENT_CHARS_MAX * 2 {
        true => Err(bad(format!(
            "{field}: at most {} characters",
            SEGMENT_CHARS_MAX * 2
        ))),
        false => Ok(s),
    }
}

impl View {
    /// The view at `path` with `query` (URL-encoded), or why there is none.
    pub fn parse(path: &str, query_str: &str) -> Result<View, Refusal> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let decode = |s: &str| {
            percent_decode(s).ok_or_else(|| bad(format!("path: {s:?} is not valid UTF-8")))
        };
        let no_query = |view: View| match query_str.is_empty() {
            true => Ok(view),
            false => Err(bad(format!("{}: takes no query", view.title()))),
        };
        match parts.as_slice() {
            ["cluster"] => no_query(View::Cluster),
            ["resources"] => no_query(View::Kinds),
            ["resources", kind] => {
                let q: ObjectsQuery = query(query_str)?;
                if !q.selector.is_empty() {
                    Selector::parse(&q.selector).map_err(|r| bad(format!("selector: {r}")))?;
                }
                Ok(View::Objects {
                    kind: segment("kind", &decode(kind)?)?,
                    namespace: within("namespace", q.namespace)?,
                    selector: within("selector", q.selector)?,
                    after: within("after", q.after)?,
                })
            }
            ["resources", kind, namespace, name] => no_query(View::Object {
                kind: segment("kind", &decode(kind)?)?,
                namespace: segment("namespace", &decode(namespace)?)?,
                name: segment("name", &decode(name)?)?,
            }),
            ["locks"] => {
                let q: LocksQuery = query(query_str)?;
                Ok(View::Locks {
                    prefix: within("prefix", q.prefix)?,
                    after: within("after", q.after)?,
                })
            }
            ["operations"] => no_query(View::Operations),
            ["pools"] => no_query(View::Pools),
            ["deployments"] => no_query(View::Deployments),
            ["deployments", namespace, name] => no_query(View::Deployment {
                namespace: segment("namespace", &decode(namespace)?)?,
                name: segment("name", &decode(name)?)?,
            }),
            ["reservations"] => no_query(View::Reservations),
            _ => Err(Refusal(
                StatusCode::NOT_FOUND,
                format!(
                    "no console page at {path} (pages: /cluster /resources /locks /operations \
                     /pools /deployments /reservations)"
                ),
            )),
        }
    }

    /// The view's address: the key of its shared renders, and what its stream is opened with.
    pub fn href(&self) -> String {
        let mut href = String::new();
        let enc = |s: &str| percent_encode(s);
        match self {
            View::Cluster => href.push_str("/cluster"),
            View::Kinds => href.push_str("/resources"),
            View::Objects {
                kind,
                namespace,
                selector,
                after,
            } => {
                let _ = write!(href, "/resources/{}", enc(kind));
                let q = [
                    ("namespace", namespace),
                    ("selector", selector),
                    ("after", after),
                ];
                push_query(&mut href, &q);
            }
            View::Object {
                kind,
                namespace,
                name,
            } => {
                let _ = write!(
                    href,
                    "/resources/{}/{}/{}",
                    enc(kind),
                    enc(namespace),
                    enc(name)
                );
            }
            View::Locks { prefix, after } => {
                href.push_str("/locks");
                push_query(&mut href, &[("prefix", prefix), ("after", after)]);
            }
            View::Operations => href.push_str("/operations"),
            View::Pools => href.push_str("/pools"),
            View::Deployments => href.push_str("/deployments"),
            View::Deployment { namespace, name } => {
                let _ = write!(href, "/deployments/{}/{}", enc(namespace), enc(name));
            }
            View::Reservations => href.push_str("/reservations"),
        }
        href
    }

    pub(super) fn title(&self) -> String {
        match self {
            View::Cluster => "Cluster".to_string(),
            View::Kinds => "Resources".to_string(),
            View::Objects { kind, .. } => format!("Resources: {kind}"),
            View::Object {
                kind,
                namespace,
                name,
            } => format!("{kind} {namespace}/{name}"),
            View::Locks { .. } => "Locks".to_string(),
            View::Operations => "Operations".to_string(),
            View::Pools => "Pools".to_string(),
            View::Deployments => "Deployments".to_string(),
            View::Deployment { namespace, name } => format!("Deployment {namespace}/{name}"),
            View::Reservations => "Reservations".to_string(),
        }
    }

    /// The navigation entry the view belongs to.
    pub(super) fn section(&self) -> &'static str {
        match self {
            View::Cluster => "/cluster",
            View::Kinds | View::Objects { .. } | View::Object { .. } => "/resources",
            View::Locks { .. } => "/locks",
            View::Operations => "/operations",
            View::Pools => "/pools",
            View::Deployments | View::Deployment { .. } => "/deployments",
            View::Reservations => "/reservations",
        }
    }
}

fn push_query(href: &mut String, pairs: &[(&str, &String)]) {
    let mut first = true;
    for (key, value) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        href.push(if first { '?' } else { '&' });
        first = false;
        let _ = write!(href, "{key}={}", percent_encode(value));
    }
}

/// `s` with everything but unreserved characters percent-encoded (RFC 3986).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let decoded: Vec<(String, String)> = serde_urlencoded::from_str(&format!("v={s}")).ok()?;
    decoded.into_iter().next().map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_view_parses_back_from_its_address() {
        let views = [
            View::Cluster,
            View::Kinds,
            View::Objects {
                kind: "Director".into(),
                namespace: "team a".into(),
                selector: "app=web,tier!=db".into(),
                after: "default/x&y".into(),
            },
            View::Object {
                kind: "Director".into(),
                namespace: "default".into(),
                name: "d/1?".into(),
            },
            View::Locks {
                prefix: "deploy/".into(),
                after: String::new(),
            },
            View::Operations,
            View::Pools,
            View::Deployments,
            View::Deployment {
                namespace: "default".into(),
                name: "dep 1".into(),
            },
            View::Reservations,
        ];
        for view in views {
            let href = view.href();
            let (path, q) = href.split_once('?').unwrap_or((&href, ""));
            match View::parse(path, q) {
                Ok(back) => assert_eq!(back, view, "{href}"),
                Err(r) => panic!("{href}: {}", r.1),
            }
        }
    }

    #[test]
    fn bad_addresses_are_refused_with_the_field() {
        let cases = [
            ("/nope", "", StatusCode::NOT_FOUND, "no console page"),
            ("/cluster", "x=1", StatusCode::BAD_REQUEST, "takes no query"),
            (
                "/resources/Director",
                "selector=a%3D%3D%3Db",
                StatusCode::BAD_REQUEST,
                "selector",
            ),
            (
                "/resources/Director",
                "colour=red",
                StatusCode::BAD_REQUEST,
                "query",
            ),
            (
                "/locks",
                &format!("prefix={}", "p".repeat(600)),
                StatusCode::BAD_REQUEST,
                "prefix",
            ),
        ];
        for (path, q, code, words) in cases {
            match View::parse(path, q) {
                Ok(v) => panic!("{path}?{q}: parsed as {v:?}"),
                Err(Refusal(got, message)) => {
                    assert_eq!(got, code, "{path}?{q}: {message}");
                    assert!(message.contains(words), "{path}?{q}: {message}");
                }
            }
        }
    }
}
