//! A lint over the client API's parsed descriptors (test-only): proto/ keeps to the rules of
//! well-kept public gRPC APIs (Google AIP, buf's DEFAULT and COMMENTS categories) without a
//! network tool. build.rs writes the descriptor set with source info (so comments are there);
//! every file whose package starts with `steward` is checked, every violation is reported at
//! once as `RULE full.name`, and the test fails if there is any.
//!
//! Rules adopted (named as buf names them, but PACKAGE_SAME_PACKAGE, which is steward's own):
//! - PACKAGE_DEFINED: every file declares a package.
//! - PACKAGE_LOWER_SNAKE_CASE: each part of the package is lower_snake_case.
//! - PACKAGE_VERSION_SUFFIX: the package's last part is a version (`v1`, `v1beta1`, `v2alpha3`).
//! - PACKAGE_SAME_PACKAGE: every checked file has the same package (one versioned API).
//! - PACKAGE_SAME_GO_PACKAGE, PACKAGE_SAME_JAVA_PACKAGE, PACKAGE_SAME_JAVA_MULTIPLE_FILES,
//!   PACKAGE_SAME_CSHARP_NAMESPACE, PACKAGE_SAME_RUBY_PACKAGE, PACKAGE_SAME_PHP_NAMESPACE,
//!   PACKAGE_SAME_SWIFT_PREFIX, PACKAGE_SAME_OBJC_CLASS_PREFIX: the files of the package agree on
//!   each language option (set in all with one value, or in none).
//! - FILE_LOWER_SNAKE_CASE: file names are lower_snake_case `.proto`.
//! - SYNTAX_SPECIFIED: every file says `syntax = "proto3"`.
//! - IMPORT_NO_PUBLIC, IMPORT_NO_WEAK: no `import public` / `import weak`.
//! - MESSAGE_PASCAL_CASE, ENUM_PASCAL_CASE, SERVICE_PASCAL_CASE, RPC_PASCAL_CASE: PascalCase
//!   names (an upper-case letter first, then letters and digits).
//! - FIELD_LOWER_SNAKE_CASE, ONEOF_LOWER_SNAKE_CASE: lower_snake_case names (a lower-case letter
//!   first, then lower-case letters, digits and single underscores, not ending in one).
//! - FIELD_NO_DESCRIPTOR: no field is named `descriptor` (any case): it breaks generated code in
//!   some languages.
//! - ENUM_VALUE_UPPER_SNAKE_CASE: enum values are UPPER_SNAKE_CASE.
//! - ENUM_VALUE_PREFIX: every value starts with its enum's name in UPPER_SNAKE_CASE and `_`
//!   (values are siblings of their enum in C++ and Python scope, so unprefixed ones collide).
//! - ENUM_FIRST_VALUE_ZERO: the first value is 0 (proto3 demands it as well).
//! - ENUM_ZERO_VALUE_SUFFIX: the value numbered 0 ends in `_UNSPECIFIED`, so a field left unset
//!   never reads as a meaningful value.
//! - ENUM_NO_ALLOW_ALIAS: no `allow_alias` (two names for one number).
//! - COMMENT_SERVICE, COMMENT_RPC, COMMENT_MESSAGE, COMMENT_FIELD, COMMENT_ONEOF, COMMENT_ENUM,
//!   COMMENT_ENUM_VALUE: each has a non-empty leading comment (trailing comments do not count,
//!   as in buf). Map entry messages are synthesized by protoc and exempt; their map field is not.
//!
//! buf DEFAULT rules NOT adopted, and why:
//! - SERVICE_SUFFIX (`...Service`): most services (`Resources`, `Locks`, `Workers`, ...) would be
//!   renamed, and with them every generated client type and the gRPC paths clients call; two
//!   (`LeaseService`, `StatusService`) keep the names of the APIs they mirror (Boskos, EMCO).
//! - RPC_REQUEST_STANDARD_NAME, RPC_RESPONSE_STANDARD_NAME, RPC_REQUEST_RESPONSE_UNIQUE
//!   (`<Rpc>Request` / `<Rpc>Response`, one pair per RPC): most messages would be renamed and
//!   split (`ObjectReply` answers six RPCs, `UpdateRequest` serves Update, UpdateStatus and
//!   txn ops); a rename of that size is churn for every client in exchange for no safety.
//! - PACKAGE_DIRECTORY_MATCH and DIRECTORY_SAME_PACKAGE (`steward/v1/steward.proto`; one
//!   package per directory): the files would move, and with them build.rs, every import path
//!   and the README's generation commands; proto/ also holds the peer API (raft.proto,
//!   `steward.raft.v1`), which is not part of the client API checked here.
//! - IMPORT_USED: needs a resolver of every type reference; protox already refuses an import
//!   that does not exist, and an unused one harms no generated code.
//! - PROTOVALIDATE: steward does not use protovalidate; the server checks every field itself.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use prost::Message;
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    ServiceDescriptorProto,
};

/// One broken rule: the rule's name and the full name of what breaks it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub rule: &'static str,
    pub element: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.rule, self.element)
    }
}

// Field numbers of descriptor.proto, which source_code_info paths are made of.
const FILE_MESSAGE_TYPE: i32 = 4;
const FILE_ENUM_TYPE: i32 = 5;
const FILE_SERVICE: i32 = 6;
const MESSAGE_FIELD: i32 = 2;
const MESSAGE_NESTED_TYPE: i32 = 3;
const MESSAGE_ENUM_TYPE: i32 = 4;
const MESSAGE_ONEOF_DECL: i32 = 8;
const ENUM_VALUE: i32 = 2;
const SERVICE_METHOD: i32 = 2;

/// Every violation in the files of `set` whose package starts with `steward`, sorted.
pub fn lint(set: &FileDescriptorSet) -> Vec<Violation> {
    let files: Vec<&FileDescriptorProto> = set
        .file
        .iter()
        .filter(|f| f.package().starts_with("steward"))
        .collect();
    let mut out = Vec::new();
    check_packages(&files, &mut out);
    for file in &files {
        FileLint::new(file, &mut out).run();
    }
    out.sort();
    out.dedup();
    out
}

fn check_packages(files: &[&FileDescriptorProto], out: &mut Vec<Violation>) {
    let packages: BTreeSet<&str> = files.iter().map(|f| f.package()).collect();
    if packages.len() > 1 {
        for f in files {
            out.push(v("PACKAGE_SAME_PACKAGE", f.name()));
        }
    }
    type Opt = fn(&FileDescriptorProto) -> Option<String>;
    let options: [(&str, Opt); 8] = [
        ("PACKAGE_SAME_GO_PACKAGE", |f| {
            f.options.as_ref()?.go_package.clone()
        }),
        ("PACKAGE_SAME_JAVA_PACKAGE", |f| {
            f.options.as_ref()?.java_package.clone()
        }),
        ("PACKAGE_SAME_JAVA_MULTIPLE_FILES", |f| {
            f.options
                .as_ref()?
                .java_multiple_files
                .map(|b| b.to_string())
        }),
        ("PACKAGE_SAME_CSHARP_NAMESPACE", |f| {
            f.options.as_ref()?.csharp_namespace.clone()
        }),
        ("PACKAGE_SAME_RUBY_PACKAGE", |f| {
            f.options.as_ref()?.ruby_package.clone()
        }),
        ("PACKAGE_SAME_PHP_NAMESPACE", |f| {
            f.options.as_ref()?.php_namespace.clone()
        }),
        ("PACKAGE_SAME_SWIFT_PREFIX", |f| {
            f.options.as_ref()?.swift_prefix.clone()
        }),
        ("PACKAGE_SAME_OBJC_CLASS_PREFIX", |f| {
            f.options.as_ref()?.objc_class_prefix.clone()
        }),
    ];
    // Across every checked file: they must be one package anyway (PACKAGE_SAME_PACKAGE).
    for (rule, get) in options {
        let values: BTreeSet<Option<String>> = files.iter().map(|f| get(f)).collect();
        if values.len() > 1 {
            for f in files {
                out.push(v(rule, f.name()));
            }
        }
    }
}

fn v(rule: &'static str, element: impl Into<String>) -> Violation {
    Violation {
        rule,
        element: element.into(),
    }
}

/// One file's checks; `comments` maps a source_code_info path to its leading comment.
struct FileLint<'a> {
    file: &'a FileDescriptorProto,
    comments: HashMap<Vec<i32>, String>,
    out: &'a mut Vec<Violation>,
}

impl<'a> FileLint<'a> {
    fn new(file: &'a FileDescriptorProto, out: &'a mut Vec<Violation>) -> Self {
        let comments = file
            .source_code_info
            .iter()
            .flat_map(|info| &info.location)
            .filter_map(|l| Some((l.path.clone(), l.leading_comments.clone()?)))
            .collect();
        FileLint {
            file,
            comments,
            out,
        }
    }

    fn push(&mut self, rule: &'static str, element: &str) {
        self.out.push(v(rule, element));
    }

    /// COMMENT_*: a non-empty leading comment at `path`.
    fn comment(&mut self, rule: &'static str, path: &[i32], element: &str) {
        let documented = self
            .comments
            .get(path)
            .is_some_and(|c| !c.trim().is_empty());
        if !documented {
            self.push(rule, element);
        }
    }

    fn run(mut self) {
        let file = self.file;
        let name = file.name();
        let package = file.package();
        if package.is_empty() {
            self.push("PACKAGE_DEFINED", name);
        } else {
            if !package.split('.').all(is_lower_snake_case) {
                self.push("PACKAGE_LOWER_SNAKE_CASE", package);
            }
            if !package.rsplit('.').next().is_some_and(is_version) {
                self.push("PACKAGE_VERSION_SUFFIX", package);
            }
        }
        let base = name.rsplit('/').next().unwrap_or(name);
        if !base.strip_suffix(".proto").is_some_and(is_lower_snake_case) {
            self.push("FILE_LOWER_SNAKE_CASE", name);
        }
        if file.syntax() != "proto3" {
            self.push("SYNTAX_SPECIFIED", name);
        }
        if !file.public_dependency.is_empty() {
            self.push("IMPORT_NO_PUBLIC", name);
        }
        if !file.weak_dependency.is_empty() {
            self.push("IMPORT_NO_WEAK", name);
        }
        for (i, m) in file.message_type.iter().enumerate() {
            self.message(m, package, &[FILE_MESSAGE_TYPE, index(i)]);
        }
        for (i, e) in file.enum_type.iter().enumerate() {
            self.enumeration(e, package, &[FILE_ENUM_TYPE, index(i)]);
        }
        for (i, s) in file.service.iter().enumerate() {
            self.service(s, package, &[FILE_SERVICE, index(i)]);
        }
    }

    fn message(&mut self, m: &DescriptorProto, scope: &str, path: &[i32]) {
        let full = join(scope, m.name());
        if m.options.as_ref().is_some_and(|o| o.map_entry()) {
            return;
        }
        if !is_pascal_case(m.name()) {
            self.push("MESSAGE_PASCAL_CASE", &full);
        }
        self.comment("COMMENT_MESSAGE", path, &full);
        for (i, f) in m.field.iter().enumerate() {
            let field = join(&full, f.name());
            if !is_lower_snake_case(f.name()) {
                self.push("FIELD_LOWER_SNAKE_CASE", &field);
            }
            if f.name().eq_ignore_ascii_case("descriptor") {
                self.push("FIELD_NO_DESCRIPTOR", &field);
            }
            self.comment("COMMENT_FIELD", &child(path, MESSAGE_FIELD, i), &field);
        }
        for (i, o) in m.oneof_decl.iter().enumerate() {
            let oneof = join(&full, o.name());
            if !is_lower_snake_case(o.name()) {
                self.push("ONEOF_LOWER_SNAKE_CASE", &oneof);
            }
            self.comment("COMMENT_ONEOF", &child(path, MESSAGE_ONEOF_DECL, i), &oneof);
        }
        for (i, n) in m.nested_type.iter().enumerate() {
            self.message(n, &full, &child(path, MESSAGE_NESTED_TYPE, i));
        }
        for (i, e) in m.enum_type.iter().enumerate() {
            self.enumeration(e, &full, &child(path, MESSAGE_ENUM_TYPE, i));
        }
    }

    fn enumeration(&mut self, e: &EnumDescriptorProto, scope: &str, path: &[i32]) {
        let full = join(scope, e.name());
        if !is_pascal_case(e.name()) {
            self.push("ENUM_PASCAL_CASE", &full);
        }
        if e.options.as_ref().is_some_and(|o| o.allow_alias()) {
            self.push("ENUM_NO_ALLOW_ALIAS", &full);
        }
        self.comment("COMMENT_ENUM", path, &full);
        if e.value.first().is_some_and(|first| first.number() != 0) {
            self.push("ENUM_FIRST_VALUE_ZERO", &full);
        }
        let prefix = format!("{}_", upper_snake(e.name()));
        for (i, value) in e.value.iter().enumerate() {
            let name = value.name();
            let element = join(&full, name);
            if !is_upper_snake_case(name) {
                self.push("ENUM_VALUE_UPPER_SNAKE_CASE", &element);
            }
            if !name.starts_with(&prefix) {
                self.push("ENUM_VALUE_PREFIX", &element);
            }
            if value.number() == 0 && !name.ends_with("_UNSPECIFIED") {
                self.push("ENUM_ZERO_VALUE_SUFFIX", &element);
            }
            self.comment("COMMENT_ENUM_VALUE", &child(path, ENUM_VALUE, i), &element);
        }
    }

    fn service(&mut self, s: &ServiceDescriptorProto, scope: &str, path: &[i32]) {
        let full = join(scope, s.name());
        if !is_pascal_case(s.name()) {
            self.push("SERVICE_PASCAL_CASE", &full);
        }
        self.comment("COMMENT_SERVICE", path, &full);
        for (i, m) in s.method.iter().enumerate() {
            let rpc = join(&full, m.name());
            if !is_pascal_case(m.name()) {
                self.push("RPC_PASCAL_CASE", &rpc);
            }
            self.comment("COMMENT_RPC", &child(path, SERVICE_METHOD, i), &rpc);
        }
    }
}

fn index(i: usize) -> i32 {
    i32::try_from(i).unwrap_or(i32::MAX)
}

fn child(path: &[i32], field: i32, i: usize) -> Vec<i32> {
    let mut p = path.to_vec();
    p.extend([field, index(i)]);
    p
}

fn join(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_string()
    } else {
        format!("{scope}.{name}")
    }
}

fn is_pascal_case(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase()) && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Words of one case class (`lower`: a-z, or A-Z) and digits joined by single underscores.
fn is_snake(s: &str, lower: bool) -> bool {
    let letter = |c: char| {
        if lower {
            c.is_ascii_lowercase()
        } else {
            c.is_ascii_uppercase()
        }
    };
    s.starts_with(letter)
        && s.split('_')
            .all(|w| !w.is_empty() && w.chars().all(|c| letter(c) || c.is_ascii_digit()))
}

fn is_lower_snake_case(s: &str) -> bool {
    is_snake(s, true)
}

fn is_upper_snake_case(s: &str) -> bool {
    is_snake(s, false)
}

/// `v1`, `v2beta1`, `v1alpha`, `v1test`: a `v`, a version > 0, an optional stability suffix.
fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let (number, suffix) = rest.split_at(digits);
    if number.is_empty() || number.starts_with('0') {
        return false;
    }
    ["", "alpha", "beta", "test"].iter().any(|stage| {
        suffix.strip_prefix(stage).is_some_and(|n| {
            n.is_empty() || (!stage.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
    })
}

/// `LockEventType` -> `LOCK_EVENT_TYPE`, `HTTPRoute` -> `HTTP_ROUTE`.
fn upper_snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if i > 0 && c.is_ascii_uppercase() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
                out.push('_');
            }
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// What the lint checked, for the test that proves it looked at the real API.
fn counts(set: &FileDescriptorSet) -> BTreeMap<&'static str, usize> {
    fn messages(m: &[DescriptorProto], n: &mut BTreeMap<&'static str, usize>) {
        for m in m {
            *n.entry("messages").or_default() += 1;
            *n.entry("fields").or_default() += m.field.len();
            *n.entry("enums").or_default() += m.enum_type.len();
            messages(&m.nested_type, n);
        }
    }
    let mut n = BTreeMap::new();
    for f in set
        .file
        .iter()
        .filter(|f| f.package().starts_with("steward"))
    {
        *n.entry("files").or_default() += 1;
        *n.entry("services").or_default() += f.service.len();
        *n.entry("rpcs").or_default() += f.service.iter().map(|s| s.method.len()).sum::<usize>();
        *n.entry("enums").or_default() += f.enum_type.len();
        messages(&f.message_type, &mut n);
    }
    n
}

fn client_api() -> Result<FileDescriptorSet, prost::DecodeError> {
    FileDescriptorSet::decode(crate::proto::CLIENT_API_DESCRIPTOR_SET)
}

#[cfg(test)]
mod tests;
