//! Attribute names: the type a description names, its canonical and
//! stored spellings, options, and the questions every module asks of a
//! name (operational? a password?). Re-exported by `matching`.

use crate::schema::{self, AttributeType};
use std::borrow::Cow;

/// The attribute type an attribute description names (options ignored).
pub fn attr_type(name: &str) -> Option<&'static AttributeType> {
    schema::get().attr(name)
}

/// The canonical lower-case name of an attribute type (DN keys, index
/// keys): the schema's first name, or the given name when unknown.
pub fn canonical(name: &str) -> Cow<'_, str> {
    match attr_type(name) {
        Some(at) => Cow::Borrowed(at.key.as_str()),
        None if name.bytes().any(|b| b.is_ascii_uppercase()) => Cow::Owned(name.to_ascii_lowercase()),
        None => Cow::Borrowed(name),
    }
}

/// The name an entry stores an attribute under: the schema's first name
/// with the description's options, as OpenLDAP returns it.
pub fn stored_name(name: &str) -> Cow<'_, str> {
    let (base, options) = match name.find(';') {
        Some(at) => name.split_at(at),
        None => (name, ""),
    };
    let options = stored_options(options);
    match attr_type(base) {
        Some(at) if at.name() != base || matches!(options, Cow::Owned(_)) => {
            Cow::Owned(format!("{}{}", at.name(), options))
        }
        _ => Cow::Borrowed(name),
    }
}

/// A description's options (`;lang-fr;lang-en`) as slapd stores them: in
/// lower case, sorted, each once (`;lang-en;lang-fr`). Options compare as
/// sets, so only the spelling returned depends on it.
fn stored_options(options: &str) -> Cow<'_, str> {
    let stored =
        !options.bytes().any(|b| b.is_ascii_uppercase()) && options.split(';').skip(1).is_sorted_by(|a, b| a < b);
    if stored {
        return Cow::Borrowed(options);
    }
    let lower = options.to_ascii_lowercase();
    let mut each: Vec<&str> = lower.split(';').skip(1).collect();
    each.sort_unstable();
    each.dedup();
    Cow::Owned(each.iter().map(|o| format!(";{o}")).collect())
}

/// An attribute description resolved once, then compared with many stored
/// names without further lookups: entries store each type under its first
/// name, so the first comparison usually decides.
#[derive(Clone, Copy)]
pub struct AttrName<'a> {
    name: &'a str,
    /// What follows the type: `;lang-en` or "".
    options: &'a str,
    /// A selection: subtypes and descriptions with more options match too.
    selecting: bool,
    at: Option<&'static AttributeType>,
    /// The type's subtypes besides itself (`name`: `cn`, `sn`, ...), which
    /// a selection of the type also returns (RFC 4512 §2.5.1).
    subtypes: &'static [usize],
}

impl<'a> AttrName<'a> {
    /// The type exactly (entries: `get`, `position`).
    pub fn new(name: &'a str) -> AttrName<'a> {
        AttrName { name, options: options_of(name), selecting: false, at: attr_type(name), subtypes: &[] }
    }

    /// The type and its subtypes (attribute selection: `name` returns `cn`).
    pub fn with_subtypes(name: &'a str) -> AttrName<'a> {
        let schema = schema::get();
        let index = schema.attr_index(name);
        let subtypes = index.map_or(&[][..], |i| schema.subtypes[i].as_slice());
        let subtypes = if subtypes.len() > 1 { subtypes } else { &[] };
        AttrName { name, options: options_of(name), selecting: true, at: index.map(|i| &schema.attrs[i]), subtypes }
    }

    /// Whether this is the description of the type with `oid`, without
    /// options: `is` of its name, without comparing names (a filter asks
    /// it of every item for the types it treats apart).
    pub fn is_type(&self, oid: &str) -> bool {
        self.options.is_empty() && self.at.is_some_and(|at| at.oid == oid)
    }

    /// Whether a stored attribute description is this one: the same type
    /// with the same options (`new`), or, for a selection
    /// (`with_subtypes`), the type or a subtype carrying at least the
    /// options asked for (`description` returns `description;lang-en`).
    pub fn is(&self, stored: &str) -> bool {
        let base = schema::base_type(stored);
        let options = &stored[base.len()..];
        // Most descriptions have no options: two empty strings.
        if !(self.options.is_empty() && options.is_empty()) {
            let exact = if self.selecting {
                options_within(self.options, options)
            } else {
                options_cover(self.options, options, false) && options_cover(options, self.options, false)
            };
            if !exact {
                return false;
            }
        }
        match self.at {
            Some(at) if at.names.iter().any(|n| n.eq_ignore_ascii_case(base)) || at.oid == base => true,
            // Most types have no subtypes: no lookup for them.
            Some(_) if !self.subtypes.is_empty() => {
                schema::get().attr_index(base).is_some_and(|t| self.subtypes.contains(&t))
            }
            Some(_) => false,
            None => self.name.eq_ignore_ascii_case(stored),
        }
    }
}

/// The options part of a description, with its leading ';' ("" for none).
fn options_of(name: &str) -> &str {
    &name[schema::base_type(name).len()..]
}

/// Whether every option in `want` (`;lang-en;x` or `lang-en;x`) is among
/// those of `have`, compared without case.
/// A language range (`lang-en-`, `lang-`: RFC 3866 §2.2) covers the tag
/// it names and every tag below it, in selections and filters, as slapd.
pub fn options_within(want: &str, have: &str) -> bool {
    options_cover(want, have, true)
}

/// `options_within`, with or without language ranges (an exact
/// description has none).
fn options_cover(want: &str, have: &str, ranges: bool) -> bool {
    let have_opts = have.split(';').filter(|o| !o.is_empty());
    want.split(';').filter(|o| !o.is_empty()).all(|w| {
        let range = ranges && w.ends_with('-') && w.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("lang-"));
        have_opts.clone().any(|h| {
            h.eq_ignore_ascii_case(w)
                || (range
                    && (h.eq_ignore_ascii_case(&w[..w.len() - 1])
                        || h.get(..w.len()).is_some_and(|p| p.eq_ignore_ascii_case(w))))
        })
    })
}

/// Whether a stored attribute description is `userPassword`: entries store
/// each type under its schema name, so this is a comparison, not a lookup
/// (it runs for every attribute of every entry a bind or search reads).
pub fn is_user_password(stored: &str) -> bool {
    // `base_type(stored)` is `userPassword` in any case, without looking
    // for the `;` of options past the twelfth byte.
    let b = stored.as_bytes();
    b.len() >= 12 && b[..12].eq_ignore_ascii_case(b"userPassword") && b.get(12).is_none_or(|c| *c == b';')
}

/// A key two descriptions share exactly when they describe the same
/// attribute (`AttrName::new(a).is(b)`: one type, the same options in any
/// order or case), for grouping thousands of them in linear time.
pub fn description_key(name: &str) -> String {
    let base = schema::base_type(name);
    let mut options: Vec<String> =
        name[base.len()..].split(';').filter(|o| !o.is_empty()).map(str::to_ascii_lowercase).collect();
    options.sort_unstable();
    options.dedup();
    let mut key = match attr_type(base) {
        Some(at) => at.oid.clone(),
        None => base.to_ascii_lowercase(),
    };
    for o in options {
        key.push(';');
        key.push_str(&o);
    }
    key
}

/// Whether two attribute descriptions name the same type.
pub fn same_attr(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b) || AttrName::new(a).is(b)
}

/// Whether the attribute is operational (returned for `+`, not for `*`).
pub fn is_operational(name: &str) -> bool {
    schema::get().is_operational(name)
}

pub fn is_no_user_modification(name: &str) -> bool {
    attr_type(name).is_some_and(|at| at.no_user_modification)
}
