//! Objects: the typed, Kubernetes-style resources users store, and everything that reads them.
//!
//! - `resource`: `Resource`, `ObjectMeta`, `ObjectKey`, their Kubernetes-style JSON.
//! - `raw_json`: `RawJson`, a spec kept as its canonical JSON text.
//! - `validate`: structural rules for kinds, names, labels, annotations, sizes.
//! - `selector`: label selectors.
//! - `count`: counts of a kind by a label's or a status field's value.
//! - `as_of`: a list page as of an earlier revision (continue tokens pin their first page's).

pub(crate) mod apply;
mod as_of;
pub mod command;
pub mod compact;
pub mod count;
pub mod map;
pub mod queries;
pub mod raw_json;
pub mod resource;
pub mod selector;
pub mod validate;
