import pytest
import torch

from kernels.checkpoint import load_checkpoint
from kernels.exits import stopping_distribution
from kernels.generate import generate_stream
from kernels.offline import corpus
from kernels.offline.objectives import (
    context_exit_losses,
    continue_targets,
    gate_loss,
    per_loop_losses,
    ponder_loss,
)
from kernels.offline.train import (
    Run,
    TrainConfig,
    batch,
    context_exits,
    parse_args,
    prepare_data,
    save_model,
    stage1_step,
    stage2_optimizer,
    stage2_step,
    task_batch,
    task_loop_targets,
    train,
)
from kernels.request import GenerationParams
from tests.kernels.test_corpus import TEXTS

DOCS = [corpus.Document(f"stdlib/m{i:02}.py", text) for i, text in enumerate(TEXTS)]


@pytest.fixture(autouse=True)
def one_thread():
    """As training does: a second intra-op thread on a busy 2-core machine is 60x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(tmp_path, **changes) -> TrainConfig:
    values = dict(
        out=str(tmp_path / "model"),
        work_dir=str(tmp_path / "work"),
        heldout_fraction=0.2,
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        loops=3,
        seq_len=24,
        batch_size=8,
        stage1_steps=30,
        warmup_steps=5,
        gate_warmup_steps=10,
        lr=1e-2,
        stage2_steps=40,
        gate_lr=0.05,
        eval_every=1000,
        eval_windows=4,
        eval_length=16,
        save_every=1000,
    )
    return TrainConfig(**{**values, **changes})


@pytest.fixture
def run(tmp_path) -> Run:
    cfg = tiny(tmp_path)
    return Run(cfg, prepare_data(cfg, DOCS), torch.device("cpu"))


def ponder_on(run: Run, tokens: torch.Tensor) -> float:
    with torch.no_grad():
        out = run.model(tokens[:, :-1])
        losses = per_loop_losses(out.step_logits, tokens[:, 1:])
        return ponder_loss(losses, out.gate_logits, run.cfg.beta)[0].item()


def gate_loss_on(run: Run, tokens: torch.Tensor) -> float:
    with torch.no_grad():
        out = run.model(tokens[:, :-1])
        losses = per_loop_losses(out.step_logits, tokens[:, 1:])
        return gate_loss(out.gate_logits, losses, run.cfg.gain_scale, run.cfg.gain_margin).item()


def test_ponder_loss_weights_loop_losses_by_the_stopping_distribution():
    # given conditionals (0.2, 0.5, ·) -> p = (0.2, 0.4, 0.4) for one token
    lam = torch.tensor([0.2, 0.5, 0.9])
    gate_logits = torch.logit(lam).view(3, 1, 1).requires_grad_()
    losses = torch.tensor([3.0, 2.0, 1.0]).view(3, 1, 1).requires_grad_()

    # when
    loss, entropy = ponder_loss(losses, gate_logits, beta=0.1)
    loss.backward()

    # then
    p = torch.tensor(stopping_distribution([0.2, 0.5, 0.9]))
    expected_entropy = -(p * p.log()).sum()
    torch.testing.assert_close(entropy, expected_entropy)
    torch.testing.assert_close(loss, (p * torch.tensor([3.0, 2.0, 1.0])).sum() - 0.1 * entropy)
    assert losses.grad is not None and gate_logits.grad is not None
    torch.testing.assert_close(losses.grad.flatten(), p)  # each loop trained by its mass
    assert gate_logits.grad[:2].abs().min() > 0 and gate_logits.grad[2].item() == 0  # λ_T unused


def test_continue_labels_come_from_detached_adjacent_gains():
    # given per-loop losses of two tokens: big then no gain; no gain then a loss increase
    losses = torch.tensor([[4.0, 1.0], [2.0, 1.0], [2.0, 1.5]]).view(3, 2, 1).requires_grad_()

    # when
    labels = continue_targets(losses, scale=50.0, margin=0.005)

    # then
    assert labels.shape == (2, 2, 1) and not labels.requires_grad
    assert labels[0, 0].item() > 0.99  # loop 2 gained 2 nats: continue
    torch.testing.assert_close(labels[1, 0], torch.sigmoid(torch.tensor([-0.25])))  # I = 0
    torch.testing.assert_close(labels[1, 1], labels[1, 0])  # a loss increase is gain 0


def test_stage_one_lowers_its_loss(run):
    # given
    probe = batch(run.data.train, run.cfg, stage=9, step=0)
    before = ponder_on(run, probe)

    # when
    for step in range(run.cfg.stage1_steps):
        stage1_step(run.model, run.opt, batch(run.data.train, run.cfg, 1, step), run.cfg, step)

    # then
    assert ponder_on(run, probe) < before - 0.5


def test_stage_two_trains_the_gate_only_and_lowers_its_loss(run):
    # given a model after a little stage one
    for step in range(10):
        stage1_step(run.model, run.opt, batch(run.data.train, run.cfg, 1, step), run.cfg, step)
    opt = stage2_optimizer(run.model, run.cfg)
    gate = run.model.model.early_exit_gate
    lm = {n: p.detach().clone() for n, p in run.model.named_parameters() if "early_exit" not in n}
    gate_before = gate.weight.detach().clone()
    probe = batch(run.data.train, run.cfg, stage=9, step=0)
    before = gate_loss_on(run, probe)

    # when
    for step in range(run.cfg.stage2_steps):
        stage2_step(run.model, opt, batch(run.data.train, run.cfg, 2, step), run.cfg)

    # then no gradient reached the LM and its weights did not move
    for name, param in run.model.named_parameters():
        if "early_exit" not in name:
            assert param.grad is None, name
            assert torch.equal(param, lm[name]), name
    assert not torch.equal(gate.weight, gate_before) and gate.weight.grad is not None
    assert gate_loss_on(run, probe) < before


def test_batches_depend_on_seed_stage_and_step_only(tmp_path):
    cfg = tiny(tmp_path)
    ids = torch.arange(1000)

    assert torch.equal(batch(ids, cfg, 1, 5), batch(ids, cfg, 1, 5))
    assert not torch.equal(batch(ids, cfg, 1, 5), batch(ids, cfg, 2, 5))
    assert batch(ids, cfg, 1, 5).shape == (cfg.batch_size, cfg.seq_len + 1)


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    # given an uninterrupted run
    straight = train(tiny(tmp_path / "a", stage1_steps=6, stage2_steps=4), docs=DOCS)

    # when a run is interrupted after 3 stage-one steps (saved every 3) and then resumed
    cfg = tiny(tmp_path / "b", stage1_steps=6, stage2_steps=4, save_every=3)
    interrupted = Run(cfg, prepare_data(cfg, DOCS), torch.device("cpu"))
    interrupted.run_stage(1, 3)
    resumed = train(cfg, resume=True, docs=DOCS)

    # then
    assert resumed.stage == 2 and resumed.step == 4
    for (name, a), b in zip(
        straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)


def test_trained_directory_loads_and_streams(tmp_path):
    # given
    run = train(tiny(tmp_path, stage1_steps=3, stage2_steps=2), docs=DOCS)

    # when
    out = save_model(run)
    loaded = load_checkpoint(out, device="cpu")
    events = list(generate_stream(loaded, "def add(a, b):", GenerationParams(max_new_tokens=4)))

    # then
    assert (out / "training.json").is_file() and (out / "tokenizer.json").is_file()
    assert loaded.tokenizer.eos_token_id == loaded.config.eos_token_id == 0
    assert "".join(e.text for e in events).startswith("def add(a, b):")
    assert {e.exit_loop for e in events} <= {1, 2, 3}


def tiny_addition(tmp_path, **changes) -> TrainConfig:
    values = dict(
        task="addition",
        digits=3,
        max_chain=2,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        loops=3,
        batch_size=16,
        stage1_steps=40,
        warmup_steps=5,
        gate_warmup_steps=20,
        lr=1e-2,
        stage2_steps=30,
        gate_lr=0.05,
        eval_windows=8,
        eval_every=1000,
        save_every=1000,
        out=str(tmp_path / "model"),
        work_dir=str(tmp_path / "work"),
    )
    return TrainConfig(**{**values, **changes})


def test_context_stops_where_the_answer_stops_gaining_and_is_labelled_by_it():
    # given K = T = 3 runs (context stopping after loop k), B = 2 rows, S = 3 positions of
    # which the last two are the answer; the answer's full-depth loss per run k:
    # row 0: 4.0, 1.0, 0.99 -> loop 3 gains 0.01 < margin: the context stops after loop 2
    # row 1: 4.0, 4.0, 1.0 -> loop 2 gains nothing, but loop 3 does: with lookahead, 3
    losses = torch.zeros(3, 3, 2, 3)  # (K, T, B, S)
    losses[:, -1, 0, 1:] = torch.tensor([4.0, 1.0, 0.99])[:, None] / 2
    losses[:, -1, 1, 1:] = torch.tensor([4.0, 4.0, 1.0])[:, None] / 2
    losses[1, 0, 0, 1:] = 7.0  # run 2's first loop: row 0's answer keeps these
    mask = torch.tensor([[False, True, True]] * 2)

    out, exit_loop = context_exit_losses(losses, mask, scale=50.0, margin=0.03, lookahead=True)

    assert exit_loop.tolist() == [2, 3]
    assert torch.allclose(out[:, 0, 0], torch.tensor([4.0, 1.0, 0.99]))  # context: by run
    assert torch.allclose(out[:, 1, 0], torch.tensor([4.0, 4.0, 1.0]))
    assert torch.equal(out[:, 0, 1:], losses[1, :, 0, 1:])  # answer: its run's own losses
    assert torch.equal(out[:, 1, 1:], losses[2, :, 1, 1:])
    _, without = context_exit_losses(losses, mask, scale=50.0, margin=0.03)
    assert without.tolist() == [2, 1]  # next-loop gains alone stop row 1 at once


def test_stage_one_stops_a_share_of_rows_context_early_from_the_gate_warmup_on(tmp_path):
    cfg = tiny_addition(tmp_path, loops=6, batch_size=400, context_exits=0.5)
    _, mask = task_batch(cfg, 1, 0)

    exits = context_exits(cfg, mask, cfg.gate_warmup_steps)
    again, later = context_exits(cfg, mask, cfg.gate_warmup_steps), context_exits(cfg, mask, 21)

    assert context_exits(cfg, mask, cfg.gate_warmup_steps - 1) is None
    assert context_exits(TrainConfig(task="addition"), mask, 10**6) is None
    assert exits is not None and again is not None and later is not None
    assert torch.equal(exits, again)  # from (seed, step) alone
    assert (exits[mask] == 6).all()  # the answer runs every loop
    rows = exits[:, 0]  # a context position: one loop per row
    assert (exits[~mask].view(len(mask), -1) == rows[:, None]).all()
    assert set(rows.tolist()) == {2, 3, 4, 5, 6}
    assert 0.4 < (rows < 6).float().mean().item() < 0.6
    assert not torch.equal(exits, later)  # each step draws anew


def test_addition_training_lowers_both_stages_losses_on_answers_only(tmp_path):
    # given (stage one's later half with some rows' context stopping early)
    cfg = tiny_addition(tmp_path, context_exits=0.5)
    run = Run(cfg, prepare_data(cfg), torch.device("cpu"))
    probe, probe_mask = task_batch(cfg, stage=9, step=0)

    def stage1_loss() -> float:
        with torch.no_grad():
            out = run.model(probe[:, :-1])
            losses = per_loop_losses(out.step_logits, probe[:, 1:])
            return ponder_loss(losses, out.gate_logits, cfg.beta, probe_mask)[0].item()

    def stage2_loss() -> float:
        n = cfg.loops
        with torch.no_grad():
            runs = [
                run.model(probe[:, :-1], exits=torch.where(probe_mask, n, k))
                for k in range(1, n + 1)
            ]
            losses, exit_loop = context_exit_losses(
                torch.stack([per_loop_losses(r.step_logits, probe[:, 1:]) for r in runs]),
                probe_mask,
                cfg.gain_scale,
                cfg.gain_margin,
            )
            gates = torch.stack([r.gate_logits for r in runs])[exit_loop - 1, :, range(len(probe))]
            gates = gates.movedim(0, 1)  # (T, B, S)
            return gate_loss(gates, losses, cfg.gain_scale, cfg.gain_margin).item()

    before = stage1_loss()

    # when stage one runs, then stage two
    for step in range(cfg.stage1_steps):
        tokens, mask = task_batch(cfg, 1, step)
        stage1_step(run.model, run.opt, tokens, cfg, step, mask)
    after_stage1 = stage1_loss()
    opt = stage2_optimizer(run.model, cfg)
    gate_before = stage2_loss()
    for step in range(cfg.stage2_steps):
        tokens, mask = task_batch(cfg, 2, step)
        stage2_step(run.model, opt, tokens, cfg, mask)

    # then
    assert after_stage1 < before - 0.3
    assert stage2_loss() < gate_before


def test_each_loop_can_have_its_own_targets():
    logits = torch.log(torch.tensor([[0.9, 0.1], [0.2, 0.8]]))[:, None, None, :]  # (T=2, 1, 1, V)
    shared = torch.tensor([[0]])  # (B, S)
    per_loop = torch.tensor([[[0]], [[1]]])  # (T, B, S)

    assert torch.allclose(
        per_loop_losses(logits, shared).flatten(), -torch.log(torch.tensor([0.9, 0.2]))
    )
    assert torch.allclose(
        per_loop_losses(logits, per_loop).flatten(), -torch.log(torch.tensor([0.9, 0.8]))
    )


def test_hops_stage_one_has_per_loop_targets_and_stage_two_the_answers():
    cfg = TrainConfig(task="hops", loops=4, max_hops=3, batch_size=4, loop_targets=True)

    ids, _ = task_batch(cfg, 1, 0)
    targets = task_loop_targets(cfg, 1, 0)

    assert targets is not None and targets.shape == (4, *ids[:, 1:].shape)
    assert torch.equal(targets[-1], ids[:, 1:]) and not torch.equal(targets[0], ids[:, 1:])
    assert task_loop_targets(cfg, 2, 0) is None


def test_lookahead_labels_continue_while_any_later_loop_still_gains():
    # an answer wrong at loops 1-3 (a middle loop does half the work), right at loop 4
    losses = torch.tensor([2.0, 2.0, 2.0, 0.0])[:, None, None]  # (T=4, B=1, S=1)

    myopic = continue_targets(losses, scale=50.0, margin=0.03).flatten()
    ahead = continue_targets(losses, scale=50.0, margin=0.03, lookahead=True).flatten()

    assert myopic.round().tolist() == [0.0, 0.0, 1.0]  # would stop at loop 1
    assert ahead.round().tolist() == [1.0, 1.0, 1.0]


def test_a_hops_curriculum_adds_one_difficulty_every_curriculum_steps(tmp_path):
    cfg = TrainConfig(
        task="hops", symbols=6, max_hops=3, queries=4, curriculum_steps=10, batch_size=8
    )

    def hops_asked(stage: int, step: int) -> set[int]:
        ids, mask = task_batch(cfg, stage, step)
        texts = [bytes(row.tolist()).decode() for row in ids]
        return {int(line[1]) for text in texts for line in text.split(";")[1].splitlines()}

    assert hops_asked(1, 0) == hops_asked(1, 9) == {1}
    assert hops_asked(1, 10) == {1, 2}
    assert hops_asked(1, 25) == hops_asked(1, 1000) == hops_asked(2, 0) == {1, 2, 3}


def test_task_defaults_apply_under_explicit_flags():
    cfg, _ = parse_args(["--task", "addition", "--loops", "3"])

    assert cfg.out == "kernels/models/add-loop" and cfg.digits == 8 and cfg.loops == 3
    with pytest.raises(SystemExit):
        parse_args(["--task", "sorting"])
