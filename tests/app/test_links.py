"""mcap.app.links: the note a page gets for a link the server dropped whole (issue 38 item 6)."""
from urllib.parse import parse_qs

from mcap.app import links


def test_the_note_names_the_keys_and_sizes_never_the_values():
    query = "profile=bundled%3Ax.profile.json&balance=" + ",".join(["1"] * 10**6)
    note = parse_qs(links.note(query, 524288, 1000))[links.DROPPED][0]
    said = links.sentence(note)
    assert "balance= (1,999,999 characters)" in said and "profile= (24 characters)" in said
    assert f"{len(query):,} characters, over the server's limit of 524,288" in said
    assert "1,1,1" not in said and "x.profile" not in said
    assert said.endswith("Showing the defaults instead.")


def test_too_many_fields_are_counted_and_the_rest_summed_up():
    query = "&".join(f"k{i}=v" for i in range(1200))
    said = links.sentence(parse_qs(links.note(query, 524288, 1000))[links.DROPPED][0])
    assert "1,200 fields, over the server's limit of 1,000" in said
    assert "k0= (1 characters)" in said and "and 1,192 more" in said


def test_a_note_that_cannot_be_read_is_said_as_it_is():
    assert "could not be read ('junk')" in links.sentence("junk")
