"""The loop's own step tracked in place (diagnose/memory/inplace.py): started and ended at
step boundaries (an optimizer's global step hook among them), the loader's work left out,
the batch counted as ``other``, memory held before the step not counted."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

from diagnose.memory.inplace import InPlaceStep  # noqa: E402
from diagnose.memory.tracker import StepTracker, run_step  # noqa: E402

from . import models as M  # noqa: E402


def _step(model, opt, b) -> None:
    M.loss(model, b).backward()
    opt.step()
    opt.zero_grad()


def test_a_step_is_tracked_from_one_optimizer_step_hook_to_the_next():
    """The session enters and leaves the tracker inside torch's global post-step hooks:
    the tracker's own optimizer hooks must not change that table while torch walks it."""
    model, b = M.mlp(), M.batch()
    opt = torch.optim.Adam(model.parameters())
    mem = InPlaceStep()

    def boundary(o, args, kwargs):
        mem.safe = True
        mem.boundary(True, model, [o])
        mem.safe = False
    handle = register_optimizer_step_post_hook(boundary)
    try:
        _step(model, opt, b)  # starts the tracker
        assert mem.state == "tracking"
        _step(model, opt, b)  # the tracked step; its optimizer step ends it
        _step(model, opt, b)  # untracked
    finally:
        handle.remove()
    assert mem.state == "done"
    kinds = mem.result.by_kind()
    assert kinds["parameters"] == M.PARAM_BYTES
    assert kinds["optimizer_state"] == M.ADAM_STATE_BYTES
    assert mem.result.step == {"amp_dtype": None, "set_to_none": True, "micro_batches": 1}
    assert mem.result.batch_size == M.BATCH  # from the model's outermost call


def test_the_loaders_work_is_left_out_and_the_batch_is_other():
    model, b = M.mlp(), M.batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rows = torch.randn(10 * M.BATCH, M.IN)
    mem = InPlaceStep()
    mem.safe = True
    mem.boundary(True, model, [opt])
    mem.on_next()
    x = torch.stack([rows[i] for i in range(M.BATCH)])  # the loader collating: untracked
    mem.on_batch((x, b[1]))
    _step(model, opt, (x, b[1]))
    mem.boundary(False, model, [opt])
    res = mem.result.to_json()
    batch_bytes = M.BATCH * M.IN * 4 + M.BATCH * 8
    assert res["batch_bytes"] == batch_bytes and res["batch_size"] == M.BATCH
    assert max(p["other"] for p in res["timeline"]["points"]) == batch_bytes


def test_a_slice_of_memory_held_before_the_step_is_not_the_steps():
    model = M.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(100 * M.BATCH, M.IN)  # 800 KB held outside the step
    labels = torch.zeros(M.BATCH, dtype=torch.long)
    with StepTracker(model, opt) as t:
        x = data[:M.BATCH]
        x.mul_(1.0)  # in place, on the data's storage
        _step(model, opt, (x, labels))
    assert t.result().tracked_peak_bytes < 200_000


def test_a_boundary_inside_a_models_call_does_not_start_it():
    """An unsafe boundary neither starts nor stops the tracking; it says why none was
    tracked until a boundary outside the calls (an optimizers' round) starts one."""
    model, b = M.mlp(), M.batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mem = InPlaceStep()
    mem.boundary(True, model, [opt])
    assert mem.state == "idle" and "inside the model's call," in (mem.why or "")
    mem.boundary(False, model, [opt])
    assert mem.state == "idle"
    mem.safe = True
    mem.boundary(True, model, [opt])  # the round closed, outside the calls
    assert mem.state == "tracking" and mem.why is None
    mem.safe = False
    M.loss(model, b).backward()
    mem.boundary(True, model, [opt])  # the next call's boundary: ignored
    assert mem.state == "tracking"
    opt.step()
    opt.zero_grad()
    mem.safe = True
    mem.boundary(True, model, [opt])
    assert mem.state == "done", mem.why
    assert mem.result.by_kind()["parameters"] == M.PARAM_BYTES


def test_a_step_left_at_the_end_of_the_loop_is_dropped():
    model, b = M.mlp(), M.batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run_step(model, opt, [b], M.loss)
    mem = InPlaceStep()
    mem.safe = True
    mem.boundary(True, model, [opt])
    mem.close()  # no exception in flight: the loop ended inside the step
    assert mem.state == "skipped" and mem.result is None
    assert mem.section() is None
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None


def test_a_process_forked_while_tracking_runs_it_paused():
    """A DataLoader's workers forked at an epoch's start inside the tracked step do not
    track their own operators."""
    import multiprocessing as mp

    model = M.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mem = InPlaceStep()
    mem.safe = True
    mem.boundary(True, model, [opt])
    try:
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        proc = ctx.Process(target=_report_paused, args=(mem.tracker, q))
        proc.start()
        assert q.get(timeout=60) is True
        proc.join(60)
        assert mem.tracker.paused is False  # this process still tracks
    finally:
        mem.close()


def _report_paused(tracker, q) -> None:
    q.put(tracker.paused)


def test_several_models_of_one_class_keep_their_modules_apart():
    """An encoder and a decoder, both nn.Sequential, given by name: torch's ModTracker would
    name both roots "Sequential", and their first ReLUs one module ("1"); each module's
    saved activations are filed under its own model's name instead (encoder.1 holds the
    encoder's 64-wide ReLU output, decoder.1 the decoder's 16-wide one)."""
    from torch import nn

    enc = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    dec = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 32))
    opt = torch.optim.SGD([*enc.parameters(), *dec.parameters()], lr=0.1)
    x = torch.randn(128, 32)
    mem = InPlaceStep()
    mem.safe = True
    roots = {"encoder": enc, "decoder": dec}
    mem.boundary(True, enc, [opt], roots)
    assert mem.state == "tracking"
    (dec(enc(x)) - x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    mem.boundary(False, enc, [opt], roots)
    assert mem.state == "done", mem.why
    res = mem.result.to_json()
    names = {m["module"] for m in res["top_modules"]}
    assert {"encoder.1", "decoder.1"} <= names, names
    assert not names & {"1", "0", "2"}, names
    classes = {m["module"]: m["class"] for m in res["top_modules"]}
    assert classes["encoder.1"] == "ReLU" == classes["decoder.1"]


def test_two_models_and_two_optimizers_count_both_states() -> None:
    """A GAN's step: the generator's and the discriminator's parameters, gradients and Adam
    states are all the model's states; a new user's report had the second Adam's state
    counted as temporaries and only the first model's parameters in the JSON."""
    from torch import nn

    def sizes(m: nn.Module) -> int:
        return sum(p.numel() * p.element_size() for p in m.parameters())

    g = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))
    d = nn.Sequential(nn.Linear(32, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
    opt_g, opt_d = torch.optim.Adam(g.parameters()), torch.optim.Adam(d.parameters())
    real = torch.randn(64, 32)

    def step() -> None:
        fake = g(torch.randn(64, 16))
        opt_d.zero_grad()
        (d(real).mean() - d(fake.detach()).mean()).backward()
        opt_d.step()
        opt_g.zero_grad()
        (-d(fake).mean()).backward()
        opt_g.step()

    step()  # both Adams hold their state before the tracked step
    mem = InPlaceStep()
    mem.safe = True
    roots = {"0": g, "1": d}
    mem.boundary(True, g, [opt_g, opt_d], roots)
    step()
    mem.boundary(False, g, [opt_g, opt_d], roots)
    assert mem.state == "done", mem.why
    both = sizes(g) + sizes(d)
    res = mem.result
    # exp_avg and exp_avg_sq of every parameter, and each one's step count (a float32)
    state = 2 * both + 4 * 8
    assert res.opt_state_bytes == state
    assert res.param_bytes == both and res.param_tensors == 8
    peak = res.by_kind()
    assert peak["optimizer_state"] == state and peak["parameters"] == both
    # the models themselves are no blocks to checkpoint: "0" and "1" name nothing in
    # the user's code (a new user's GAN was offered checkpoint_modules ["0", "1"])
    assert not any(w.get("change", {}).get("checkpoint_modules")
                   for w in _what_ifs(res)), res.blocks
    assert res.blocks is None or res.blocks["container"], res.blocks


def _what_ifs(res):
    from diagnose.memory.whatif import scaled_what_ifs

    return [w.to_json() for w in scaled_what_ifs(res.to_json())]


def test_a_frozen_layer_is_tracked_and_its_weight_has_no_gradient():
    """Fine-tuning with a frozen layer: torch refuses a gradient hook on a parameter that
    needs none, which MemTracker asked for every parameter (it raised into the user's
    forward). Tracked, the step holds the trainable layer's gradient only."""
    from diagnose.memory.tracker import track_step

    model, b = M.mlp(), M.batch()
    model[0].requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    run_step(model, opt, [b], M.loss)
    m = track_step(model, opt, b, M.loss)
    assert m.oom is None
    assert max(p.grads for p in m.points) == M.HID * M.OUT * 4  # the second Linear's only
    assert model[0].weight.grad is None
    # and in place, inside the loop's own step
    mem = InPlaceStep()
    mem.safe = True
    mem.boundary(True, model, [opt])
    _step(model, opt, b)
    mem.boundary(True, model, [opt])
    assert mem.state == "done", mem.why


def test_a_frozen_backbones_weights_size_no_optimizer_temporaries():
    """A frozen backbone's weights make no gradient, so the optimizer's temporaries, one
    parameter at a time, are sized by the largest trainable one (the batch's weight-sized
    temporaries, a transpose or a cast, still by the largest of all). Sized by the
    backbone's (a new user's fine-tuning job, 6 MiB frozen), SGD for Adam read 14.3 MiB
    where SGD measured 6.7."""
    from torch import nn

    from diagnose.memory import scaled
    from diagnose.memory.tracker import track_step

    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
    backbone.requires_grad_(False)
    model = nn.Sequential(backbone, nn.Linear(256, 10))
    b = (torch.randn(16, 64), torch.randint(0, 10, (16,)))

    def loss(m, batch):
        return nn.functional.cross_entropy(m(batch[0]), batch[1])

    def tracked(make):
        opt = make([p for p in model.parameters() if p.requires_grad])
        run_step(model, opt, [b], loss)
        run_step(model, opt, [b], loss)
        return track_step(model, opt, b, loss)

    adam = tracked(lambda ps: torch.optim.Adam(ps, foreach=False)).to_json()
    assert adam["model"]["largest_trained_parameter"] == 256 * 10 * 4
    assert adam["model"]["largest_parameter"] == 256 * 256 * 4  # the weight temporaries
    sgd = tracked(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)).peak_bytes
    w = scaled(adam, {"optimizer_class": "SGD"})
    assert w.range[0] <= sgd * 1.02 and w.range[1] <= sgd * 1.10, (w.range, sgd)


def test_another_optimizer_is_sized_by_the_parameters_the_optimizers_hold():
    """A body updated by hand (``p -= lr * p.grad``) beside an optimizer that holds the
    head alone: SGD's momentum for Adam covers the head, not the body (a new user's GAN,
    G's body by hand: SGD was predicted at 15.2-16.3 MiB where it measured 13.2)."""
    from torch import nn

    from diagnose.memory import scaled
    from diagnose.memory.tracker import track_step

    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU())
    head = nn.Linear(512, 10)
    model = nn.Sequential(body, head)
    b = (torch.randn(16, 64), torch.randint(0, 10, (16,)))

    def loss(m, batch):
        return nn.functional.cross_entropy(m(batch[0]), batch[1])

    def by_hand(opt, args, kwargs):
        with torch.no_grad():
            for p in body.parameters():
                p -= 0.01 * p.grad
                p.grad = None

    def tracked(make):
        opt = make(list(head.parameters()))
        opt.register_step_post_hook(by_hand)
        run_step(model, opt, [b], loss)
        run_step(model, opt, [b], loss)
        return track_step(model, opt, b, loss)

    adam = tracked(lambda ps: torch.optim.Adam(ps, foreach=False)).to_json()
    head_bytes = sum(p.numel() * 4 for p in head.parameters())
    assert adam["model"]["optimized_parameters"] == head_bytes
    assert adam["model"]["optimized_tensors"] == 2
    assert adam["model"]["gradients"] > 10 * head_bytes  # the body's too
    sgd = tracked(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)).peak_bytes
    w = scaled(adam, {"optimizer_class": "SGD"})
    assert w.range[0] <= sgd * 1.02 and w.range[1] <= sgd * 1.10, (w.range, sgd)
    # a section from before the optimizers' parameters were recorded: all trainable ones
    old = {**adam, "model": {k: v for k, v in adam["model"].items()
                             if "optimized" not in k}}
    assert scaled(old, {"optimizer_class": "SGD"}).range[1] > w.range[1] + head_bytes


def test_a_tensor_the_loop_makes_is_filed_outside_the_model():
    """A batch the loop makes inside the step (sliced by hand, no DataLoader) and the first
    layer saves: made outside every model's forward, so not the model's own (a new user's
    GAN read "(model) 0.4 MiB" for its hand-sliced batch)."""
    from torch import nn

    from diagnose.memory.profile import OUTSIDE
    from diagnose.memory.tracker import track_step

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 10))
    rows = torch.randn(1024, 256)
    b = (torch.arange(128), torch.randint(0, 10, (128,)))

    def loss(m, batch):
        x = rows[batch[0]]  # the loop's own slice: 128 x 256 floats, saved by the Linear
        return nn.functional.cross_entropy(m(x), batch[1])

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run_step(model, opt, [b], loss)
    doc = track_step(model, opt, b, loss).to_json()
    top = {m["module"]: m["saved_bytes"] for m in doc["top_modules"]}
    assert top.get(OUTSIDE) == 128 * 256 * 4, top
    assert "0" not in top or top["0"] < 128 * 256 * 4  # the layer did not make it


def test_a_child_called_without_its_root_keeps_its_attribute_name():
    """A LightningModule's training_step calls ``self.net(x)``, never the module's own
    forward: its layers are named ``net.1``, not ``Sequential.1`` (a new user's report)."""
    from torch import nn

    from diagnose.memory.tracker import track_step

    class Lit(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    torch.manual_seed(0)
    model = Lit()
    b = (torch.randn(32, 64), torch.randint(0, 10, (32,)))

    def loss(m, batch):
        return nn.functional.cross_entropy(m.net(batch[0]), batch[1])

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run_step(model, opt, [b], loss)
    doc = track_step(model, opt, b, loss).to_json()
    names = {m["module"]: m["class"] for m in doc["top_modules"]}
    assert names.get("net.1") == "ReLU" and not any("Sequential" in n for n in names), names


def test_a_hook_that_raises_gives_up_the_count_not_the_step(monkeypatch):
    """The tracker's hooks are its own bookkeeping: where one raises, the step goes on
    untracked and the result says why (in place: skipped with the error; track_step: a
    RuntimeError after the step, which has run)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    from diagnose.memory.tracker import track_step

    def boom(self, module, inputs):
        raise RuntimeError("a MemTracker internal failed")
    monkeypatch.setattr(MemTracker, "_pre_fw_hook", boom)
    model, b = M.mlp(), M.batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model[2].weight.detach().clone()
    mem = InPlaceStep()
    mem.safe = True
    mem.boundary(True, model, [opt])
    _step(model, opt, b)  # does not raise
    mem.boundary(True, model, [opt])
    assert mem.state == "skipped"
    assert "a MemTracker internal failed" in mem.why
    assert not torch.equal(model[2].weight, before)  # the step ran
    with pytest.raises(RuntimeError, match="could not count this step"):
        track_step(model, opt, b, M.loss)


def test_a_sparse_operator_gives_up_the_count_not_the_step():
    """torch's MemTracker cannot read a sparse tensor's storage (it raised from the saved-
    tensor hook and the dispatch, inside the user's forward): the step runs on untracked,
    in place the section is skipped with torch's error, and track_step says so after."""
    from torch import nn

    from diagnose.memory.tracker import track_step

    class Sparse(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(M.IN, M.OUT)
            self.a = torch.eye(M.BATCH).to_sparse()

        def forward(self, x):
            return self.lin(torch.sparse.mm(self.a, x))
    model, b = Sparse(), M.batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.lin.weight.detach().clone()
    mem = InPlaceStep()
    mem.safe = True
    mem.boundary(True, model, [opt])
    _step(model, opt, b)
    mem.boundary(True, model, [opt])
    assert mem.state == "skipped" and "SparseTensorImpl" in mem.why
    assert not torch.equal(model.lin.weight, before)
    with pytest.raises(RuntimeError, match="could not count this step"):
        track_step(model, opt, b, M.loss)


def _gradient_penalty_step(model, opt, b) -> None:
    """A WGAN-GP critic's step: the gradient of the critic at a leaf input (interpolates
    made with ``requires_grad_()``), by ``autograd.grad`` with ``create_graph``."""
    x, _ = b
    xi = x.detach().clone().requires_grad_(True)
    g, = torch.autograd.grad(model(xi).sum(), xi, create_graph=True)
    loss = model(x).mean() + ((g.norm(2, dim=1) - 1) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def _pinn_step(model, opt, b) -> None:
    """A physics-informed step: the model's derivative in its input coordinates (a leaf
    that needs a gradient, passed to the model alone) in the loss."""
    x, _ = b
    xs = x.detach().clone().requires_grad_(True)
    u = model(xs)
    du, = torch.autograd.grad(u.sum(), xs, create_graph=True)
    loss = (du ** 2).mean() + (u ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


@pytest.mark.parametrize("step", [_gradient_penalty_step, _pinn_step])
def test_autograd_grad_on_a_leaf_input_runs_and_is_counted(step):
    """torch's ModTracker raises inside the user's ``autograd.grad`` where a module's input
    is a leaf (pytorch/pytorch#131753: "A leaf node was passed to
    _will_engine_execute_node"): the tracked step must run as it would untracked, and be
    counted, the model's outermost call giving the batch size. The input's gradient is no
    micro-batch: one backward made the parameters' gradients."""
    model, b = M.mlp(), M.batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mem = InPlaceStep()
    mem.safe = True
    mem.boundary(True, model, [opt])
    before = model[2].weight.detach().clone()
    step(model, opt, b)  # the tracked step
    mem.boundary(True, model, [opt])
    step(model, opt, b)  # untracked, after it
    assert mem.state == "done", mem.why
    assert not torch.equal(model[2].weight, before)
    kinds = mem.result.by_kind()
    assert kinds["parameters"] == M.PARAM_BYTES
    assert kinds["activations"] > 0
    assert mem.result.batch_size == M.BATCH
    assert mem.result.step["micro_batches"] == 1


def test_a_leaf_input_is_left_out_of_the_backward_hook_not_of_the_call():
    """The module gets its leaf input itself (the same tensor, still needing a gradient);
    only the tracker's hook sees it detached."""
    from diagnose.memory.modtracker import LeafSafeModTracker

    seen = []
    model = M.mlp()
    model.register_forward_pre_hook(lambda m, inp: seen.append(inp[0]))
    x = M.batch()[0].clone().requires_grad_(True)
    with LeafSafeModTracker():
        g, = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    assert seen[0] is x and g.shape == x.shape


def _accumulated_step(model, opt, b, k: int = 3, penalty: bool = False) -> None:
    """``k`` micro-batches each with its own backward, the first with an input gradient
    first (``penalty``), then one optimizer step."""
    x, y = b
    opt.zero_grad()
    for i, (xs, ys) in enumerate(zip(x.chunk(k), y.chunk(k), strict=True)):
        if penalty and i == 0:
            xi = xs.detach().clone().requires_grad_(True)
            torch.autograd.grad(model(xi).sum(), xi)
        (M.loss(model, (xs, ys)) / k).backward()
    opt.step()


@pytest.mark.parametrize("penalty", [False, True])
def test_micro_batches_are_the_backward_passes_that_make_parameter_gradients(penalty):
    model, b = M.mlp(), M.batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mem = InPlaceStep()
    mem.safe = True
    mem.boundary(True, model, [opt])
    _accumulated_step(model, opt, b, penalty=penalty)
    mem.boundary(True, model, [opt])
    assert mem.state == "done", mem.why
    assert mem.result.step["micro_batches"] == 3


def test_two_optimizers_are_named_in_the_optimizer_what_if():
    """A GAN's step runs two optimizers: the tracker counts both states, the section lists
    both classes, and the what-if of another class (SGD for Adam) says it is every
    optimizer of the step, with a range that holds the same step run with two SGDs."""
    from torch import nn

    from diagnose.memory import scaled

    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 32))
    disc = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
    x = torch.randn(64, 16)

    def tracked(make):
        g_opt, d_opt = make(gen.parameters()), make(disc.parameters())
        mem = InPlaceStep()
        mem.safe = True
        roots = {"gen": gen, "disc": disc}
        for i in range(3):  # two warm steps (the optimizers' state made), then the tracked
            mem.boundary(i == 2, gen, [g_opt, d_opt], roots)
            disc(gen(x).detach()).mean().backward()
            d_opt.step()
            d_opt.zero_grad()
            (-disc(gen(x)).mean()).backward()
            g_opt.step()
            g_opt.zero_grad()
            disc.zero_grad()
        mem.boundary(True, gen, [g_opt, d_opt], roots)
        assert mem.state == "done", mem.why
        return mem.result.to_json()

    adam = tracked(lambda ps: torch.optim.Adam(ps, foreach=False))
    assert adam["model"]["optimizer_classes"] == ["Adam", "Adam"]
    params = sum(p.numel() * 4 for p in (*gen.parameters(), *disc.parameters()))
    assert adam["model"]["optimizer_state"] >= 2 * params  # both Adams' two buffers
    sgd = tracked(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False))
    w = scaled(adam, {"optimizer_class": "SGD"})
    assert "every optimizer of the step as SGD (its 2: Adam, Adam)" in w.note
    assert w.range[0] <= sgd["peak_bytes"] * 1.02 and w.range[1] >= sgd["peak_bytes"] * 0.98, (
        w.range, sgd["peak_bytes"])
    one = tracked(lambda ps: torch.optim.SGD(ps, lr=0.1))  # one class, two optimizers still
    assert one["model"]["optimizer_classes"] == ["SGD", "SGD"]
