"""Through a real uvicorn, started as ``make run`` and the compose file start it: the
proposal budget belongs to the connection's address, whatever X-Forwarded-For a client
makes up (uvicorn's own proxy headers are off; NUM_PROXIES alone decides)."""

import httpx
import pytest

from tests.atlas.api.test_proposals import proposal
from tests.playground.stack import suite_stack

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def web(tmp_path):
    stack = suite_stack(tmp_path)
    stack.start_web()
    yield stack
    stack.stop()


def test_a_made_up_forwarded_for_does_not_reset_the_proposal_budget(web) -> None:
    # when one client sends seven proposals, each claiming another address
    codes = [
        httpx.post(
            f"{web.base}/api/v1/proposals/",
            json=proposal(title=f"Loop study {n}", arxiv_id=f"2611.0000{n}"),
            headers={"X-Forwarded-For": f"203.0.113.{n}"},
            timeout=30,
        ).status_code
        for n in range(7)
    ]
    # then its connection's address has the default budget of five an hour
    assert codes == [201] * 5 + [429] * 2
