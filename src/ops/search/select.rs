//! Which attributes a search returns (`Selection`) and the writing of one
//! SearchResultEntry: stored attributes the requester may read, Matched
//! Values, computed operational attributes.

use super::*;

/// The attribute types an `@class` selection names; none for an unknown class.
pub(super) fn class_attrs(class: &str) -> Vec<matching::AttrName<'static>> {
    let schema = shards::schema::get();
    let Some(c) = schema.class_index(class) else { return Vec::new() };
    let mut chain = Vec::new();
    schema.closure(c, &mut chain);
    let mut types: Vec<usize> =
        chain.iter().flat_map(|c| schema.classes[*c].must.iter().chain(&schema.classes[*c].may)).copied().collect();
    types.sort_unstable();
    types.dedup();
    types.into_iter().map(|t| matching::AttrName::with_subtypes(schema.attrs[t].name())).collect()
}

/// Whether `class` (a known class) is not yet marked in `expanded`;
/// marks it.
fn first_time(expanded: &mut Vec<bool>, class: &str) -> bool {
    let schema = shards::schema::get();
    let Some(c) = schema.class_index(class) else { return true };
    if expanded.is_empty() {
        expanded.resize(schema.classes.len(), false);
    }
    !std::mem::replace(&mut expanded[c], true)
}

/// Whether `class` names extensibleObject (by a name or its OID).
fn is_extensible_object(class: &str) -> bool {
    let schema = shards::schema::get();
    schema.class_index(class).is_some_and(|c| Some(c) == schema.class_index("extensibleObject"))
}

/// The class a selection names: `@person` (RFC 4529), or `person`, a name
/// that is no attribute type but a class (slapd still reads this older
/// form of `@person`, and so select clients written against it).
fn as_class(name: &str) -> Option<&str> {
    let schema = shards::schema::get();
    match name.strip_prefix('@') {
        Some(class) => Some(class),
        None => (schema.attr(name).is_none() && schema.class_index(name).is_some()).then_some(name),
    }
}

/// Which attributes a search returns, with the requested names resolved
/// once per request.
pub struct Selection<'a> {
    user: bool,
    operational: bool,
    names: Vec<matching::AttrName<'a>>,
    pub types_only: bool,
    /// Matched Values items (RFC 3876): of an attribute one of them names,
    /// only the values some item matches are returned.
    pub values: Vec<filter::Node>,
    /// The most value tests Matched Values may make per entry
    /// (`limits.max_filter_tests`; 0: no limit, the root DN's).
    pub value_tests: u64,
    /// Whether numSubordinates is left out: for a requester some rule may
    /// hide entries from, a count of children would include those it may
    /// not see (hasSubordinates tells no more than slapd's does).
    hide_counts: bool,
}

/// What the requester may read of an entry's attributes: the access
/// rules' class of a stored name (`ReadPlan::class`, which depends on the
/// rules and the name alone) and whether a class may be read in this entry.
pub(crate) trait Readable {
    /// Which compiled rules `class` follows (`Acl::id`; 0: a list not
    /// compiled, whose classes are not kept; `ROOT_RULES` for the root DN).
    fn rules(&self) -> u64;
    fn class(&self, stored: &str) -> u64;
    fn allows(&self, class: u64) -> bool;
    fn name(&self, stored: &str) -> bool {
        self.allows(self.class(stored))
    }
}

/// What a stored attribute name comes to, whatever the entry: whether it
/// is operational (for the selection) and its class under the rules.
struct NameFacts {
    name: String,
    operational: bool,
    class: u64,
}

/// The names of the entries this reactor last wrote and their facts, by
/// position in the entry, under one rule list: entries mostly hold the
/// same names in the same order, so an entry costs a compare of each name
/// rather than a schema lookup and a pass over the rules' attribute lists.
#[derive(Default)]
struct StoredNames {
    rules: u64,
    by_position: Vec<NameFacts>,
}

/// `Readable::rules` of the root DN, whom no rule applies to: never a
/// compiled list's id (those count up from 1).
pub(crate) const ROOT_RULES: u64 = u64::MAX;

/// Positions kept (attributes past them are worked out each time), of
/// names of at most 255 bytes (`EntryView`): a bounded 16 KiB or so.
const NAMES_KEPT: usize = 64;

thread_local! {
    static STORED_NAMES: RefCell<StoredNames> = RefCell::default();
}

impl StoredNames {
    /// The facts of the name at position `i`, kept.
    fn facts(&mut self, i: usize, name: &str, readable: &impl Readable) -> (bool, u64) {
        let work = || (matching::is_operational(name), readable.class(name));
        let len = self.by_position.len();
        match self.by_position.get_mut(i) {
            Some(kept) if kept.name == name => (kept.operational, kept.class),
            Some(kept) => {
                (kept.operational, kept.class) = work();
                kept.name.clear();
                kept.name.push_str(name);
                (kept.operational, kept.class)
            }
            None if i == len && i < NAMES_KEPT => {
                let (operational, class) = work();
                self.by_position.push(NameFacts { name: name.to_owned(), operational, class });
                (operational, class)
            }
            None => work(),
        }
    }
}

impl<'a> Selection<'a> {
    pub fn new(attrs: &'a [String], types_only: bool) -> Selection<'a> {
        let mut sel = Selection {
            user: attrs.is_empty(),
            operational: false,
            names: Vec::new(),
            types_only,
            values: Vec::new(),
            value_tests: 0,
            hide_counts: false,
        };
        // Classes already expanded: a class named again adds nothing, and
        // 17,000 `inetOrgPerson` in one list made 884,000 names.
        let mut expanded: Vec<bool> = Vec::new();
        for a in attrs {
            match a.as_str() {
                "*" => sel.user = true,
                "+" => sel.operational = true,
                "1.1" => {}
                name => match as_class(name) {
                    // As slapd: extensibleObject allows every attribute, so
                    // `@extensibleObject` selects all, operational ones too.
                    Some(class) if is_extensible_object(class) => (sel.user, sel.operational) = (true, true),
                    // RFC 4529: every attribute the class (and its superclasses) allows.
                    Some(class) if first_time(&mut expanded, class) => sel.names.extend(class_attrs(class)),
                    Some(_) => {}
                    // `cn;`: no attribute description, so it selects nothing
                    // (as slapd, which drops it from the list).
                    None if !shards::schema::check::options_well_formed(name) => {}
                    None => sel.names.push(matching::AttrName::with_subtypes(name)),
                },
            }
        }
        sel
    }

    /// This selection with numSubordinates left out or not (`hide_counts`).
    pub fn hiding_counts(mut self, hide: bool) -> Selection<'a> {
        self.hide_counts = hide;
        self
    }

    /// Whether a stored attribute is returned.
    pub fn wants(&self, name: &str) -> bool {
        self.wants_as(name, || matching::is_operational(name))
    }

    /// `wants`, told whether the name is operational.
    fn wants_as(&self, name: &str, operational: impl FnOnce() -> bool) -> bool {
        if self.names.iter().any(|n| n.is(name)) {
            return true;
        }
        if self.user == self.operational {
            return self.user;
        }
        if operational() {
            self.operational
        } else {
            self.user
        }
    }

    /// Whether an operational attribute computed at read time is returned.
    pub fn wants_computed(&self, name: &str) -> bool {
        self.operational || self.names.iter().any(|n| n.is(name))
    }

    /// Whether an entry's children must be counted for it (a `children`
    /// lookup per entry is otherwise wasted).
    pub(crate) fn counts_children(&self) -> bool {
        self.wants_computed("hasSubordinates") || self.wants_computed("numSubordinates")
    }
}

/// Writes one SearchResultEntry with the selected stored and computed
/// attributes the requester may read.
pub(crate) fn write_entry(
    out: &mut BytesMut,
    msgid: i32,
    view: &EntryView<'_>,
    n_children: u64,
    sel: &Selection,
    readable: &impl Readable,
    context_csn: Option<&[Vec<u8>]>,
) -> Result<()> {
    // Room for the computed ones too: one allocation.
    let mut attrs: Vec<OutAttr<'_, Vals<'_>>> = Vec::with_capacity(view.n_attrs() + 4);
    STORED_NAMES.with_borrow_mut(|names| {
        let rules = readable.rules();
        if names.rules != rules {
            *names = StoredNames { rules, by_position: Vec::new() };
        }
        let shown = view.attrs().enumerate().filter(|(i, a)| {
            let (operational, class) = match rules {
                0 => (matching::is_operational(a.name), readable.class(a.name)),
                _ => names.facts(*i, a.name, readable),
            };
            sel.wants_as(a.name, || operational) && readable.allows(class)
        });
        attrs.extend(shown.map(|(_, a)| OutAttr { name: a.name, vals: a.vals() }));
    });
    let mut computed = computed_attrs(view.dn(), n_children, sel);
    computed.retain(|(name, _)| readable.name(name));
    for (name, buf) in &computed {
        attrs.push(OutAttr { name, vals: Vals::from_encoded(buf, 1) });
    }
    let mut csns = Vec::new();
    if let Some(values) = context_csn.filter(|v| !v.is_empty() && readable.name("contextCSN")) {
        let slices: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        encode_vals(&slices, &mut csns);
        attrs.push(OutAttr { name: "contextCSN", vals: Vals::from_encoded(&csns, values.len() as u32) });
    }
    let matched;
    // RFC 3876 §2: no effect on a typesOnly search (the types are listed).
    if !sel.values.is_empty() && !sel.types_only {
        let is_computed = |name: &str| computed.iter().any(|(c, _)| *c == name);
        matched = matched_values(&sel.values, &attrs, sel.value_tests, is_computed)?;
        attrs = matched.iter().map(|(name, buf, n)| OutAttr { name, vals: Vals::from_encoded(buf, *n) }).collect();
    }
    ber::search_entry(out, msgid, view.dn(), &attrs, sel.types_only);
    Ok(())
}

/// What Matched Values (RFC 3876) leaves of the attributes: the values
/// some item matches, encoded; as slapd, a stored attribute no value of
/// which an item matched is left out, and one computed as the entry is
/// sent (`is_computed`: hasSubordinates, entryDN, ...) is sent as its
/// type with no values (slapd filters those in a loop of their own that
/// never drops an attribute). At most `most` value tests
/// (0: no limit): items times values on cn=Subschema, or on a group of a
/// million members, is reactor time an anonymous client could spend.
pub(super) fn matched_values<'v>(
    items: &[filter::Node],
    attrs: &[OutAttr<'v, Vals<'v>>],
    most: u64,
    is_computed: impl Fn(&str) -> bool,
) -> Result<Vec<(&'v str, Vec<u8>, u32)>> {
    let tests: u64 = attrs.iter().map(|a| a.vals.clone().count() as u64).sum::<u64>() * items.len() as u64;
    if most > 0 && tests > most {
        return Err(Error::new(
            LdapResultCode::AdminLimitExceeded,
            format!("matched values: {tests} value tests, more than {most} (limits.max_filter_tests)"),
        ));
    }
    let mut out = Vec::new();
    for a in attrs {
        let kept: Vec<&[u8]> =
            a.vals.clone().filter(|v| items.iter().any(|i| i.value_matches(a.name, v) == Some(true))).collect();
        if !kept.is_empty() || is_computed(a.name) {
            let mut buf = Vec::new();
            encode_vals(&kept, &mut buf);
            out.push((a.name, buf, kept.len() as u32));
        }
    }
    Ok(out)
}

/// Operational attributes computed at read time, when selected.
pub(crate) fn computed_attrs(dn: &str, n_children: u64, sel: &Selection) -> Vec<(&'static str, Vec<u8>)> {
    let mut res = Vec::new();
    let mut add = |name: &'static str, value: &[u8]| {
        if sel.wants_computed(name) {
            let mut buf = Vec::with_capacity(value.len() + 4);
            encode_vals(&[value], &mut buf);
            res.push((name, buf));
        }
    };
    add("hasSubordinates", if n_children > 0 { b"TRUE" } else { b"FALSE" });
    if sel.wants_computed("numSubordinates") && !sel.hide_counts {
        add("numSubordinates", n_children.to_string().as_bytes());
    }
    add("entryDN", dn.as_bytes());
    add("subschemaSubentry", subschema::DN.as_bytes());
    res
}

/// Writes an entry the server computes (root DSE, `cn=Subschema`) when it
/// matches: only `objectClass` and other user attributes for `*`.
/// Returns whether it was written. `tests` bounds the filter on it
/// (`limits.max_filter_tests`; 0 for the root DN): `cn=Subschema` holds
/// thousands of values, open to anyone.
pub(super) fn write_computed(
    out: &mut BytesMut,
    msgid: i32,
    entry: &Entry,
    filter: &filter::Node,
    sel: &Selection,
    tests: u64,
) -> Result<bool> {
    let mut bytes = Vec::new();
    if entry.encode(&mut bytes).is_err() {
        return Ok(false);
    }
    // As slapd, which adds subschemaSubentry only as it sends these
    // entries: the filter is tested on the entry without it (a copy, made
    // only when the filter names it; a type-less extensible item may).
    let mut names_it = false;
    filter.for_each_attr(&mut |n| names_it |= n.is_none_or(|n| n.name() == "subschemaSubentry"));
    if names_it {
        let added = |a: &&shards::entry::Attr| a.name.eq_ignore_ascii_case("subschemaSubentry");
        let attrs = entry.attrs.iter().filter(|a| !added(a)).cloned().collect();
        let mut tested = Vec::new();
        if (Entry { dn: entry.dn.clone(), attrs }).encode(&mut tested).is_err() {
            return Ok(false);
        }
        let view = EntryView::new(&tested).expect("encoded just now");
        if filter.eval_bounded(&view, &|_| true, tests)? != Some(true) {
            return Ok(false);
        }
    }
    let view = EntryView::new(&bytes).expect("encoded just now");
    if !names_it && filter.eval_bounded(&view, &|_| true, tests)? != Some(true) {
        return Ok(false);
    }
    let mut attrs: Vec<_> =
        view.attrs().filter(|a| sel.wants(a.name)).map(|a| OutAttr { name: a.name, vals: a.vals() }).collect();
    // Matched Values on the root DSE and cn=Subschema too (as slapd: a
    // client picks one schema definition out so).
    let matched;
    if !sel.values.is_empty() && !sel.types_only {
        // entryDN and subschemaSubentry are computed there too (slapd's
        // `backend_operational`).
        let is_computed = |name: &str| matches!(name, "entryDN" | "subschemaSubentry");
        matched = matched_values(&sel.values, &attrs, sel.value_tests, is_computed)?;
        attrs = matched.iter().map(|(name, buf, n)| OutAttr { name, vals: Vals::from_encoded(buf, *n) }).collect();
    }
    ber::search_entry(out, msgid, entry.dn.as_str(), &attrs, sel.types_only);
    Ok(true)
}
