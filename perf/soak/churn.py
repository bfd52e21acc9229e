#!/usr/bin/env python3
"""The mirror soak's change stream for one side, as LDIF for `ldapmodify -c`.

Each round: five users renamed and moved to ou=moved (two of them picked
the same on both sides, so both rename one entry at once), last round's
moved back; a member added to and one removed from a groupOfNames on
both sides; one DN added on both sides (a DN conflict when the sides are
apart, or when both adds cross); an old such entry deleted. Which changes
fail (32 after the other side moved an entry, 68 for a DN already there)
depends on timing: `-c` goes on, and the soak compares the end states.

Usage: churn.py SIDE FIRST_ROUND ROUNDS [USERS]
"""
import sys

side, first, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
users = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
base = "dc=example,dc=com"
people, moved, groups = f"ou=people,{base}", f"ou=moved,{base}", f"ou=groups,{base}"
offset = 0 if side == "a" else users // 2


def picks(r):
    """The users this side moves in round r: two shared with the other side."""
    shared = [(r * 7919 + k * 131) % users for k in range(2)]
    own = [(r * 104729 + k * 977 + offset) % users for k in range(3)]
    return shared + own


def rename(dn, rdn, superior):
    return f"dn: {dn}\nchangetype: modrdn\nnewrdn: {rdn}\ndeleteoldrdn: 1\nnewsuperior: {superior}\n"


out = []
for r in range(first, first + rounds):
    for k, u in enumerate(picks(r)):
        out.append(rename(f"uid=user{u},{people}", f"uid=mv-{side}-{r}-{k}", moved))
    if r > first:
        for k, u in enumerate(picks(r - 1)):
            out.append(rename(f"uid=mv-{side}-{r - 1}-{k},{moved}", f"uid=user{u}", people))
    g = 2 * (r % 50) + 1
    member = f"uid=user{(r * 31 + offset) % users},{people}"
    out.append(f"dn: cn=group{g},{groups}\nchangetype: modify\nadd: member\nmember: {member}\n")
    old = f"uid=user{((r - 3) * 31 + offset) % users},{people}"
    out.append(f"dn: cn=group{2 * ((r - 3) % 50) + 1},{groups}\nchangetype: modify\ndelete: member\nmember: {old}\n")
    out.append(
        f"dn: uid=clash-{r},{people}\nchangetype: add\nobjectClass: inetOrgPerson\nuid: clash-{r}\n"
        f"cn: clash {r}\nsn: from {side}\n"
    )
    if r - first >= 5:
        out.append(f"dn: uid=clash-{r - 5},{people}\nchangetype: delete\n")
print("\n".join(out))
