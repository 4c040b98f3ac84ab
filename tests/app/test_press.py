"""mcap.app.press: where the Memory savers page opens a profile with MPress statistics."""
def test_showcase_picks_the_partitioning_a_plan_lowers_most():
    """Issue 40 item 14: the Memory savers page opens the press profile where a plan helps."""
    from mcap.app.press import Room, candidates, showcase
    rooms = [Room((2, 2), 100, 100, 0, 10), Room((3, 1), 120, 110, 0, 10),
             Room((1, 3), 130, 100, 1, 10)]
    assert showcase(rooms).balance == (1, 3)
    assert showcase(rooms[:1]).balance == (2, 2)  # none worth it: the first, said by the page
    assert candidates(6, 3, [(2, 2, 2)]) == [(2, 2, 2), (4, 1, 1), (3, 2, 1), (1, 4, 1),
                                           (2, 3, 1), (1, 3, 2), (1, 1, 4), (1, 2, 3)]
