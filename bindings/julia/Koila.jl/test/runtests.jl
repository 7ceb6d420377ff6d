# The tests of the Julia binding. Run from the repository root with
#
#     KOILA_LIB=build/libkoila.so KOILA_TEST_MODELS=build/tests/models \
#         julia --project=bindings/julia/Koila.jl bindings/julia/Koila.jl/test/runtests.jl
#
# (ctest runs them as julia.runtests). KOILA_TEST_MODELS is the directory holding mlp.pt,
# written by koila_make_models; without it the module tests are skipped with a warning.

using Test
using Koila
using Koila: LibKoila

# The KoilaError that f() throws, checked for its code (and a fragment of its message).
function koila_error(f, code; contains = nothing)
    err = try
        f()
        nothing
    catch e
        e
    end
    @test err isa KoilaError
    err isa KoilaError || return err
    @test err.code == code
    if contains !== nothing
        @test occursin(contains, err.msg)
    end
    return err
end

# Counts the calls of a DLPack deleter built in the tests (a @cfunction needs a global).
const deleted = Ref(0)
count_deleter(::Ptr{Cvoid}) = (deleted[] += 1; nothing)

# Shares each array with koila and reads it back; the tensors are garbage once this returns.
shared_round_trips(arrays) = all(B -> Array(shared_tensor(B)) == B, arrays)

@testset "Koila" begin

@testset "library" begin
    v = Koila.version()
    @test v == VersionNumber(LibKoila.KOILA_VERSION_MAJOR, LibKoila.KOILA_VERSION_MINOR,
                             LibKoila.KOILA_VERSION_PATCH)
    @test !isempty(LibKoila.libkoila_loaded_from[])
    # Every function of the header was resolved.
    @test all(ref[] != C_NULL for (_, ref) in LibKoila._FUNCTIONS)
    @test LibKoila.KOILA_NO_BATCH == typemin(Int64)
    @test Int(LibKoila.KOILA_ERROR_INTERNAL) == 9
    @test sizeof(LibKoila.koila_dtype) == sizeof(Cint)
end

@testset "round trips keep size and logical index" begin
    A = Float32[1 2 3; 4 5 6]
    t = Tensor(A)
    @test size(t) == (2, 3)
    @test size(t, 1) == 2 && size(t, 2) == 3 && size(t, 3) == 1
    @test ndims(t) == 2 && length(t) == 6
    @test eltype(t) == Float32
    @test !islazy(t) && batchdim(t) === nothing
    @test Array(t) == A
    @test collect(t) == A
    @test t[2, 1] == 4.0f0 && t[1, 3] == 3.0f0
    @test t[2, 1] isa Float32
    # koila sees rows: row sums are 6 and 15, column sums 5, 7, 9.
    @test Array(sum(t; dims = 2)) == Float32[6, 15]
    @test Array(sum(t; dims = 1)) == Float32[5, 7, 9]
    @test size(sum(t; dims = 2, keepdims = true)) == (2, 1)
    # reshape is row-major (torch): 1 2 3 4 5 6 read by rows.
    @test Array(reshape(t, 3, 2)) == Float32[1 2; 3 4; 5 6]
    @test Array(reshape(t, :)) == Float32[1, 2, 3, 4, 5, 6]
    @test Array(flatten(t)) == Float32[1, 2, 3, 4, 5, 6]

    B = reshape(collect(1.0:24.0), 2, 3, 4)       # Float64, 3-D
    tb = Tensor(B)
    @test size(tb) == (2, 3, 4) && eltype(tb) == Float64
    @test Array(tb) == B
    @test tb[2, 3, 4] == B[2, 3, 4] && tb[1, 2, 3] == B[1, 2, 3]
    @test Array(tb[2, :, 2:3]) == B[2, :, 2:3]
    @test Array(tb[:, 1, :]) == B[:, 1, :]
    @test tb[-1, -2, 1] == B[2, 2, 1] && tb[end, end, end] == B[2, 3, 4]   # from the end
    @test Array(tb[end, 2:end, 1:end-1]) == B[2, 2:3, 1:3]
    all_of_it = tb[:, :, :]                  # a new handle: closing it leaves tb open
    @test all_of_it !== tb && Array(all_of_it) == B
    close(all_of_it)
    @test Array(tb) == B
    @test Array(permutedims(tb, (3, 1, 2))) == permutedims(B, (3, 1, 2))
    @test Array(transpose(tb, 1, 3)) == permutedims(B, (3, 2, 1))

    M = [1 -2 3; 4 5 -6]
    for T in (Float64, Float16, Int64, Int32, Int8, UInt8)
        C = T <: Integer ? map(v -> v % T, M) : T.(M)
        tc = Tensor(C)
        @test eltype(tc) == T
        @test Array(tc) == C
        @test tc[2, 3] === C[2, 3]
    end
    mask = [true false; false true]
    tm = Tensor(mask)
    @test eltype(tm) == Bool && Array(tm) == mask
    @test Array(Tensor(BitArray(mask))) == mask
    bf = Tensor(BFloat16.(Float32[1.5, -2.0, 0.25]))
    @test eltype(bf) == BFloat16
    @test Float32.(Array(bf)) == Float32[1.5, -2.0, 0.25]
    @test Float32(BFloat16(1.0f0 + 2.0f0^-8)) == 1.0f0                # a tie: to even
    @test Float32(BFloat16(1.0f0 + 3 * 2.0f0^-8)) == 1.0f0 + 2.0f0^-6   # a tie: to even
    @test Float32(BFloat16(1.0f0 + 2.0f0^-8 + 2.0f0^-12)) == 1.0f0 + 2.0f0^-7

    s = Tensor(3.5f0)                                   # 0-dimensional
    @test size(s) == () && ndims(s) == 0
    @test s[] === 3.5f0 && item(s) == 3.5
    @test Array(s)[] == 3.5f0
    e = Tensor(zeros(Float32, 0, 3))
    @test size(e) == (0, 3) && Array(e) == zeros(Float32, 0, 3)
    @test Array(Tensor([1.0, 2.0], Float32)) == Float32[1, 2]
    @test eltype(Tensor([1, 2], Float32)) == Float32
    v = Tensor(Float32[10, 20, 30])
    @test v[2] == 20.0f0
    @test Array(v[2:3]) == Float32[20, 30]
    @test Array(Tensor(view(Float32[1 2; 3 4], :, 2))) == Float32[2, 4]

    z = Koila.zeros(2, 3)
    @test eltype(z) == Float32 && Array(z) == zeros(Float32, 2, 3)
    @test Array(Koila.ones(Int64, 2)) == [1, 1]
    Koila.manual_seed!(7)
    r1 = Array(Koila.randn(4, 5))
    Koila.manual_seed!(7)
    r2 = Array(Koila.randn((4, 5)))
    @test r1 == r2 && size(r1) == (4, 5) && eltype(r1) == Float32
    @test eltype(Koila.randn(Float64, 3)) == Float64
    @test occursin("Tensor{Float32}(2×3)", sprint(show, z))
    @test occursin("Tensor{Float32}(2×3):", sprint(show, MIME"text/plain"(), z))
    @test occursin("CPUFloatType{2,3}", sprint(show, MIME"text/plain"(), z))   # LibTorch's print
end

@testset "the C test's graph: values, metadata, gradients" begin
    x = Tensor(Float32[1 -2 3; -4 5 -6])
    w = Tensor(Float32[0.5 1 2])
    requires_grad!(w)
    lx = lazy(x, 1)
    @test islazy(lx) && batchdim(lx) == 1
    h = linear(lx, w)         # [2, 1]: 1*.5-2*1+3*2 = 4.5, -4*.5+5-12 = -9
    r = relu(h)
    @test size(r) == (2, 1)
    @test batchdim(r) == 1
    @test islazy(r)
    @test eltype(r) == Float32
    @test Array(r) ≈ reshape(Float32[4.5, 0], 2, 1)
    loss = sum(r)
    @test size(loss) == ()
    @test item(loss) ≈ 4.5
    backward!(loss)
    g = grad(w)
    @test g !== nothing
    @test Array(g) == Float32[1 -2 3]    # only sample 1 passes the relu
    @test occursin("4.5", Koila.to_string(loss))
    @test occursin("lazy, batch dim 1", sprint(show, r))
    @test occursin("4.5", sprint(show, MIME"text/plain"(), loss))
    zero_grad!(w)
    @test Array(g) == zeros(Float32, 1, 3)   # the grad handle aliases the gradient
    @test grad(x) === nothing

    # Batch dims: negative, none, and lazy on a Julia array.
    @test batchdim(lazy(x, -1)) == 2
    @test batchdim(lazy(x, nothing)) === nothing
    @test islazy(lazy(x, nothing))
    la = lazy(Float32[1 2; 3 4])
    @test islazy(la) && batchdim(la) == 1 && Array(la) == Float32[1 2; 3 4]
    @test Array(evaluate(la)) == Float32[1 2; 3 4] && !islazy(evaluate(la))
end

@testset "errors are KoilaErrors with their code" begin
    r = relu(lazy(Tensor(Float32[1 2; 3 4]), 1))
    koila_error(() -> item(r), KOILA_ERROR_INVALID_ARGUMENT; contains = "exactly one element")
    koila_error(() -> r[], KOILA_ERROR_INVALID_ARGUMENT; contains = "exactly one element")
    koila_error(() -> Koila.zeros(2, 3; device = "cuda:99"), KOILA_ERROR_DEVICE)
    koila_error(() -> Tensor(Float32[1, 2]) .+ Tensor(Float32[1, 2, 3]), KOILA_ERROR_SHAPE)
    koila_error(() -> Tensor(Float32[1 2; 3 4]) * Tensor(Float32[1, 2, 3]), KOILA_ERROR_SHAPE)
    koila_error(() -> Koila.randn(Int64, 2, 2), KOILA_ERROR_DTYPE)
    koila_error(() -> Tensor(Int16[1, 2]), KOILA_ERROR_DTYPE)
    koila_error(() -> Tensor(Any[1, 2]), KOILA_ERROR_DTYPE)
    koila_error(() -> Koila.memory_stats("cuda:7"), KOILA_ERROR_DEVICE)
    koila_error(() -> requires_grad!(lazy(Tensor(Float32[1, 2]), 1)), KOILA_ERROR_INVALID_ARGUMENT)
    t = Tensor(Float32[1 2; 3 4])
    koila_error(() -> sum(t; dims = 0), KOILA_ERROR_INVALID_ARGUMENT; contains = "dimension 0")
    koila_error(() -> softmax(t, 3), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> lazy(t, 0), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> t[3, 1], KOILA_ERROR_INVALID_ARGUMENT; contains = "out of bounds")
    koila_error(() -> t[1], KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> cross_entropy(t, t; reduction = :avg), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> set_memory_budget!(-1), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> SGD([t]; lr = -1.0), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> Koila.load("/no/such/dir/model.pt"), KOILA_ERROR_IO; contains = "/no/such/dir/model.pt")
    # A NUL cannot reach C (Julia refuses it in a Cstring): a KoilaError, as any bad argument.
    koila_error(() -> Koila.zeros(2; device = "cp\0u"), KOILA_ERROR_INVALID_ARGUMENT; contains = "NUL")
    koila_error(() -> Koila.load("model\0.pt"), KOILA_ERROR_INVALID_ARGUMENT; contains = "NUL")
    koila_error(() -> t[-3, 1], KOILA_ERROR_INVALID_ARGUMENT; contains = "out of bounds")
    err = koila_error(() -> Koila.randn(Int8, 1), KOILA_ERROR_DTYPE)
    @test occursin("KoilaError(KOILA_ERROR_DTYPE)", sprint(showerror, err))
    # Errors of the raw layer, through @check.
    out = Ref{Ptr{LibKoila.koila_tensor}}(C_NULL)
    koila_error(KOILA_ERROR_INVALID_ARGUMENT) do
        @check LibKoila.koila_add(Ptr{Ptr{LibKoila.koila_tensor}}(0), t, t)
    end
    @check LibKoila.koila_tensor_zeros(out, Int64[2, 2], 2, LibKoila.KOILA_FLOAT32, "cpu")
    @test out[] != C_NULL
    raw = Tensor(out[])   # takes ownership
    @test Array(raw) == zeros(Float32, 2, 2)
end

@testset "close: idempotent, use after close throws, finalizers do not double free" begin
    t = Tensor(Float32[1, 2, 3])
    l = lazy(t, 1)
    e = exp.(l)
    @test isopen(t)
    close(t)
    @test !isopen(t)
    close(t)                                 # idempotent
    koila_error(() -> size(t), KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")
    koila_error(() -> Array(t), KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")
    koila_error(() -> t + t, KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")
    koila_error(() -> t .* 2, KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")
    koila_error(() -> cat(t, t; dims = 1), KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")
    koila_error(() -> lazy(t), KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")
    @test sprint(show, t) == "Tensor(<closed>)"
    # What was built from t still works (it keeps what it reads alive).
    @test Array(e) ≈ exp.(Float32[1, 2, 3])
    close(l)
    @test Array(e) ≈ exp.(Float32[1, 2, 3])

    p = Plan(sum(e))
    close(p)
    close(p)
    koila_error(() -> num_chunks(p), KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")
    koila_error(() -> describe(p), KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")

    w = requires_grad!(Tensor(Float32[1, 2]))
    o = SGD([w]; lr = 0.1)
    close(o)
    close(o)
    koila_error(() -> step!(o), KOILA_ERROR_INVALID_ARGUMENT; contains = "closed")

    # Many handles left to the garbage collector, some closed first.
    for k in 1:200
        a = Tensor(rand(Float32, 8, 8))
        b = lazy(a, 1) .* 2 .+ 1
        iseven(k) && close(a)
        c = sum(b)
        k % 3 == 0 && close(c)
    end
    GC.gc(true)
    GC.gc(true)
    @test true
end

@testset "operators and broadcasting" begin
    A = Float32[1 -2 3; -4 5 -6]
    B = Float32[0.5 1 2; 3 -1 0.25]
    a, b = Tensor(A), Tensor(B)
    @test Array(a + b) == A + B
    @test Array(a - b) == A - B
    @test Array(-a) == -A
    @test Array(a .* b) == A .* B
    @test Array(a ./ b) ≈ A ./ B
    @test Array(a .+ 1) == A .+ 1
    @test Array(1 .- a) == 1 .- A
    @test Array(2 .* a) == 2 .* A
    @test Array(a * 2) == A * 2 && Array(2a) == 2A
    @test Array(a / 2) == A / 2
    @test Array(2 ./ b) ≈ 2 ./ B
    @test Array(a .^ 2) == A .^ 2
    @test Array(abs.(a) .^ 0.5f0) ≈ abs.(A) .^ 0.5f0
    @test Array(exp.(a)) ≈ exp.(A)
    @test Array(exp(a)) ≈ exp.(A)                      # elementwise, not a matrix exponential
    @test Array(log.(abs.(a))) ≈ log.(abs.(A))
    @test Array(sqrt.(abs.(a))) ≈ sqrt.(abs.(A))
    @test Array(sin.(a)) ≈ sin.(A) && Array(cos.(a)) ≈ cos.(A) && Array(tanh.(a)) ≈ tanh.(A)
    @test Array((v -> 2v + 1).(a)) == 2 .* A .+ 1
    @test Array(relu.(a .* b .+ 1)) == max.(A .* B .+ 1, 0)
    @test Array(max.(a, 0)) == max.(A, 0) && Array(min.(a, b)) == min.(A, B)
    @test Array(max(a, b)) == max.(A, B)
    @test Array(broadcast(*, a, b, a)) == A .* B .* A     # n-ary: elementwise, not matmul
    @test Array(clamp.(a, -1, 2)) == clamp.(A, -1, 2)
    @test Array(clamp(a, -1, 2)) == clamp.(A, -1, 2)
    gt0 = a .> 0
    @test eltype(gt0) == Bool && Array(gt0) == (A .> 0)
    @test Array(a .== b) == (A .== B)
    @test Array(a .!= 3) == (A .!= 3)
    @test Array(a .<= b) == (A .<= B) && Array(a .>= 0) == (A .>= 0) && Array(0 .< a) == (0 .< A)
    @test Array(a .+ Float32[10, 20, 30]') == A .+ Float32[10, 20, 30]'   # a Julia array joins in
    # PyTorch broadcasting: a (3,) row vector applies to each row.
    @test Array(a .+ Tensor(Float32[10, 20, 30])) == A .+ Float32[10, 20, 30]'
    @test Array(sigmoid(a)) ≈ 1 ./ (1 .+ exp.(-A))
    @test Array(rsqrt(abs(a))) ≈ 1 ./ sqrt.(abs.(A))
    @test Array(leaky_relu(a, 0.1)) ≈ ifelse.(A .> 0, A, 0.1f0 .* A)
    @test size(gelu(a)) == (2, 3) && size(silu(a)) == (2, 3)
    # Lazy inputs give lazy results with the same values.
    la = lazy(a, 1)
    y = relu.(la .* b .+ 1)
    @test islazy(y) && batchdim(y) == 1
    @test Array(y) == max.(A .* B .+ 1, 0)
    @test Array(dropout(a, 0.5; train = false)) == A
    d = Array(dropout(Koila.ones(1000), 0.5))
    @test all(v -> v == 0 || v == 2, d) && 300 < count(iszero, d) < 700
end

@testset "ops" begin
    A = Float32[1 2; 3 4; 5 6]                 # 3×2
    W = Float32[1 0; 0 1; 1 1]                 # 3×2: out 3, in 2
    a, w = Tensor(A), Tensor(W)
    @test Array(a * Tensor(Float32[1 0; 0 1])) == A
    @test Array(matmul(a, w')) == A * W'
    @test Array(a * transpose(w)) == A * W'
    @test Array(linear(a, w)) == A * W'
    @test Array(linear(a, w, Tensor(Float32[1, 2, 3]))) == A * W' .+ Float32[1 2 3]
    sm = Array(softmax(a, 2))
    @test sm ≈ exp.(A) ./ sum(exp.(A); dims = 2)
    @test Array(softmax(a; dims = -1)) ≈ sm
    @test Array(log_softmax(a, 1)) ≈ log.(exp.(A) ./ sum(exp.(A); dims = 1))
    @test Array(sum(a)) == fill(21.0f0) && item(sum(a)) == 21
    @test Array(Koila.mean(a; dims = 1)) ≈ Float32[3, 4]
    @test Array(maximum(a; dims = 2)) == Float32[2, 4, 6] && item(maximum(a)) == 6
    @test Array(minimum(a; dims = 1)) == Float32[1, 2] && Array(amin(a; dims = (1, 2))) == fill(1.0f0)
    @test Array(amax(a; dims = 1, keepdims = true)) == Float32[5 6]
    am = argmax(Tensor(Float32[1 9 3; 7 2 4]); dims = 2)
    @test eltype(am) == Int64 && Array(am) == [1, 0]       # 0-based positions
    @test item(argmax(Tensor(Float32[1 9 3; 7 2 4]))) == 1
    @test Array(vcat(a, a)) == vcat(A, A)
    @test Array(hcat(a, a)) == hcat(A, A)
    @test Array(cat(a, a; dims = 2)) == hcat(A, A)
    st = stack([a, a]; dims = 1)
    @test size(st) == (2, 3, 2) && Array(st)[2, :, :] == A
    @test size(stack((a, a, a); dims = 3)) == (3, 2, 3)
    @test Array(narrow(a, 1, 2, 2)) == A[2:3, :]
    @test Array(narrow(a, 2, -1, 1)) == A[:, 2:2]
    @test Array(index_select(a, 1, [3, 1])) == A[[3, 1], :]
    @test Array(index_select(a, 1, Tensor([2, 0]))) == A[[3, 1], :]     # tensor values are 0-based
    @test size(unsqueeze(a, 1)) == (1, 3, 2) && size(unsqueeze(a, -1)) == (3, 2, 1)
    @test size(squeeze(unsqueeze(a, 2), 2)) == (3, 2) && size(squeeze(a, 1)) == (3, 2)
    @test size(flatten(Koila.zeros(2, 3, 4), 2)) == (2, 12)
    @test size(flatten(Koila.zeros(2, 3, 4), 1, 2)) == (6, 4)
    @test Array(permutedims(a, (2, 1))) == permutedims(A) && Array(a') == permutedims(A)

    # Convolution and pooling (shapes, and a value computed by hand).
    x = Tensor(reshape(Float32.(1:16), 1, 1, 4, 4))
    k = Koila.ones(1, 1, 2, 2)
    c = conv2d(x, k)
    @test size(c) == (1, 1, 3, 3)
    X = Array(x)[1, 1, :, :]
    @test Array(c)[1, 1, 1, 1] == sum(X[1:2, 1:2])
    @test size(conv2d(x, k; stride = 2, padding = 1)) == (1, 1, 3, 3)
    @test size(conv1d(Koila.zeros(2, 3, 10), Koila.zeros(4, 3, 3), Koila.zeros(4); padding = 1)) == (2, 4, 10)
    @test Array(max_pool2d(x, 2))[1, 1, :, :] == [maximum(X[i:i+1, j:j+1]) for i in (1, 3), j in (1, 3)]
    @test size(avg_pool2d(x, (2, 2); stride = 1)) == (1, 1, 3, 3)
    @test Array(adaptive_avg_pool2d(x, 1))[] ≈ sum(X) / 16
    @test Array(upsample_nearest2d(x, 2))[1, 1, :, :] == repeat(X, inner = (2, 2))
    koila_error(() -> upsample_nearest2d(x, 0), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> conv2d(x, k; stride = (1, 2, 3)), KOILA_ERROR_INVALID_ARGUMENT)

    # Normalization and embedding.
    ln = Array(layer_norm(a, 2; eps = 0.0))
    @test ln ≈ Float32[-1 1; -1 1; -1 1] atol = 1e-5
    bn = batch_norm(Koila.randn(8, 4); training = true)
    @test size(bn) == (8, 4)
    @test maximum(abs.(Array(Koila.mean(bn; dims = 1)))) < 1e-5
    E = Tensor(Float32[1 1; 2 2; 3 3; 4 4])
    @test Array(embedding(E, Tensor([3 0; 1 1]))) == reshape(Float32[4, 2, 1, 2, 4, 2, 1, 2], 2, 2, 2)

    # Losses.
    P, Q = Float32[1 2; 3 4], Float32[1 0; 0 1]
    @test item(mse_loss(Tensor(P), Tensor(Q))) ≈ sum((P .- Q) .^ 2) / 4
    @test item(l1_loss(Tensor(P), Tensor(Q); reduction = :sum)) ≈ sum(abs.(P .- Q))
    @test size(mse_loss(Tensor(P), Tensor(Q); reduction = :none)) == (2, 2)
    logits = Float32[2 1 0; 0 1 3]
    labels = [0, 2]                                   # 0-based class indices
    lse = log.(sum(exp.(logits); dims = 2))
    expected = -(logits[1, 1] - lse[1] + logits[2, 3] - lse[2]) / 2
    @test item(cross_entropy(Tensor(logits), Tensor(labels))) ≈ expected
    @test item(nll_loss(log_softmax(Tensor(logits), 2), Tensor(labels))) ≈ expected
    bce = item(binary_cross_entropy_with_logits(Tensor(Float32[0, 2]), Tensor(Float32[1, 0])))
    @test bce ≈ (log(2) + log(1 + exp(2))) / 2 rtol = 1e-5

    # Attention: with one key, the output is its value.
    q = Koila.randn(2, 4, 8)
    kk = Koila.randn(2, 1, 8)
    vv = Koila.randn(2, 1, 5)
    at = scaled_dot_product_attention(q, kk, vv)
    @test size(at) == (2, 4, 5)
    @test Array(at) ≈ repeat(Array(vv), 1, 4, 1)
    @test size(scaled_dot_product_attention(q, q, q; causal = true)) == (2, 4, 8)
end

@testset "memory timeline of a plan" begin
    b = Tensor(fill(1.0f0, 64, 16))
    total = sum(exp.(lazy(b, 1)))
    plan = Plan(total, :forward)
    tl = Timeline(plan; unsplit = true)
    evs = events(tl)
    @test !isempty(evs)
    @test all(e -> e.live_bytes <= e.peak_bytes, evs)
    @test evs[peak_index(tl)].peak_bytes == maximum(e -> e.peak_bytes, evs)
    @test sum(memory_part(tl, p) for p in (:in_use, :activations, :gradients, :temporaries, :beyond_simulation)) ==
          full_peak_bytes(plan)
    @test_throws KoilaError memory_part(tl, :nonsense)
    close(tl)
    @test !isopen(tl)
end

@testset "memory budget and plans (as the C test)" begin
    GC.gc()   # so that no finalizer frees a tensor between the next two calls
    Koila.memory_reset_peak!()
    st = memory_stats()
    @test st.peak >= st.current
    b = Tensor(fill(1.0f0, 64, 16))
    @test memory_stats().current >= 64 * 16 * 4
    total = sum(exp.(lazy(b, 1)))
    budget = memory_budget()
    current = memory_stats().current
    @test budget > current
    plan = Plan(total, :forward)
    @test batch_size(plan) == 64
    @test chunk_size(plan) == 64
    @test num_chunks(plan) == 1
    @test peak_bytes(plan) >= current
    @test peak_bytes(plan) == full_peak_bytes(plan)
    @test budget_bytes(plan) > 0
    @test occursin("batch 64", describe(plan))
    @test occursin("batch 64", sprint(show, plan))
    # The need: the estimate with koila's margin, within the budget since it runs unsplit.
    @test peak_bytes(plan) < needed_bytes(plan) <= budget_bytes(plan)
    @test full_needed_bytes(plan) == needed_bytes(plan)
    @test occursin("koila's margin of 10%", describe(plan))
    @test item(total) ≈ 64 * 16 * exp(1.0) rtol = 1e-5
    noplan = Plan(sum(Tensor(Float32[1, 2])))
    @test batch_size(noplan) === nothing && chunk_size(noplan) === nothing && num_chunks(noplan) == 1
    try
        set_memory_budget!(1)
        koila_error(() -> item(total), KOILA_ERROR_OUT_OF_MEMORY)
        koila_error(() -> Plan(total, :forward), KOILA_ERROR_OUT_OF_MEMORY)
    finally
        set_memory_budget!(0)
    end
    @test item(total) ≈ 64 * 16 * exp(1.0) rtol = 1e-5
    koila_error(() -> Plan(total, :backwards), KOILA_ERROR_INVALID_ARGUMENT)
end

@testset "optimizers against hand-written updates" begin
    w = requires_grad!(Tensor(Float32[1, -2, 3]))
    loss = sum(w .* w)                      # gradient 2w
    backward!(loss)
    @test Array(grad(w)) == Float32[2, -4, 6]
    opt = SGD([w]; lr = 0.1)
    step!(opt)
    @test Array(w) ≈ Float32[1, -2, 3] .* 0.8f0
    zero_grad!(opt)
    @test Array(grad(w)) == zeros(Float32, 3)

    # SGD with momentum and weight decay, two steps, as torch.optim.SGD.
    w0 = Float32[0.5, -1.5]
    v = requires_grad!(Tensor(w0))
    opt = SGD([v]; lr = 0.1, momentum = 0.9, weight_decay = 0.01)
    expected = copy(w0)
    buf = zeros(Float32, 2)
    for k in 1:2
        zero_grad!(opt)
        backward!(sum(v .* v))
        g = 2 .* expected .+ 0.01f0 .* expected
        buf = k == 1 ? g : 0.9f0 .* buf .+ g
        expected = expected .- 0.1f0 .* buf
        step!(opt)
    end
    @test Array(v) ≈ expected rtol = 1e-5

    # Adam's first step moves each parameter by lr against the sign of its gradient.
    u = requires_grad!(Tensor(Float32[1, -2, 3]))
    opt = Adam([u]; lr = 0.01)
    backward!(sum(u .* u))
    step!(opt)
    @test Array(u) ≈ Float32[1, -2, 3] .- 0.01f0 .* sign.(Float32[1, -2, 3]) rtol = 1e-4
    koila_error(() -> Adam([u]; betas = (0.9, 1.0)), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> SGD([u, 1.0]; lr = 0.1), KOILA_ERROR_INVALID_ARGUMENT; contains = "not a Tensor")
end

@testset "AdamW, the learning rate and optimizer files" begin
    # AdamW's first step: p -= lr * wd * p, then Adam's lr * g / (|g| + eps) = lr * sign(g).
    start = Float32[1, -2, 0.5]
    w = requires_grad!(Tensor(start))
    opt = AdamW([w]; lr = 0.01, weight_decay = 0.1)
    @test opt.kind == :AdamW && sprint(show, opt) == "AdamW()"
    backward!(sum(w .* w))
    step!(opt)
    @test Array(w) ≈ start .* (1 - 0.01f0 * 0.1f0) .- 0.01f0 .* sign.(start) rtol = 1e-5
    @test Array(grad(w)) == 2 .* start      # the decay leaves the gradient alone
    # Adam's L2 decay goes into the gradient instead: its first step is lr * sign.
    a = requires_grad!(Tensor(start))
    adam = Adam([a]; lr = 0.01, weight_decay = 0.1)
    backward!(sum(a .* a))
    step!(adam)
    @test Array(a) ≈ start .- 0.01f0 .* sign.(start) rtol = 1e-5
    koila_error(() -> AdamW([w]; betas = (0.9, 1.0)), KOILA_ERROR_INVALID_ARGUMENT; contains = "AdamW")
    koila_error(() -> AdamW([w]; weight_decay = -1), KOILA_ERROR_INVALID_ARGUMENT)
    @test lr(AdamW([w])) == 1e-3

    # The learning rate: set, read, checked; the next step uses it.
    v = requires_grad!(Tensor(Float32[1, 2]))
    sgd = SGD([v]; lr = 0.1)
    @test lr(sgd) == 0.1
    @test set_lr!(sgd, 0.25) === sgd
    @test lr(sgd) == 0.25
    for bad in (-1.0, NaN, Inf)
        koila_error(() -> set_lr!(sgd, bad), KOILA_ERROR_INVALID_ARGUMENT)
    end
    @test lr(sgd) == 0.25
    backward!(sum(v .* v))
    step!(sgd)
    @test Array(v) == Float32[0.5, 1.0]

    # Files: what save writes, load! reads into an optimizer of the same kind and shapes.
    dir = mktempdir()
    state = joinpath(dir, "adamw.state")
    Koila.save(opt, state)
    other = AdamW([w]; lr = 0.2)
    bytes = read(state)
    write(joinpath(dir, "truncated.state"), bytes[1:length(bytes) ÷ 2])
    koila_error(() -> load!(other, joinpath(dir, "truncated.state")), KOILA_ERROR_IO)
    flipped = copy(bytes)
    flipped[length(flipped) ÷ 2] ⊻= 0x10
    write(joinpath(dir, "corrupt.state"), flipped)
    koila_error(() -> load!(other, joinpath(dir, "corrupt.state")), KOILA_ERROR_IO)
    koila_error(() -> load!(other, joinpath(dir, "missing.state")), KOILA_ERROR_IO)
    @test lr(other) == 0.2
    for mismatched in (SGD([w]; lr = 0.3), Adam([w]; lr = 0.3), AdamW([v]; lr = 0.3), AdamW([w, v]; lr = 0.3))
        koila_error(() -> load!(mismatched, state), KOILA_ERROR_INVALID_ARGUMENT)
        @test lr(mismatched) == 0.3
    end
    @test load!(other, state) === other
    @test lr(other) == 0.01
    koila_error(() -> Koila.save(opt, joinpath(dir, "no", "such", "folder", "x.state")), KOILA_ERROR_IO)

    # The random generators' file: the draws after a load are those that followed the save;
    # a missing or garbage file throws KOILA_ERROR_IO and changes no generator.
    draw() = Array(Koila.randn(Float32, 16))
    manual_seed!(3)
    draw()
    rng = joinpath(dir, "rng.bin")
    rng_save(rng)
    after_save, later = draw(), draw()
    @test after_save != later
    rng_load!(rng)
    @test draw() == after_save
    @test draw() == later
    write(joinpath(dir, "garbage.bin"), "not a generator file")
    for bad in (joinpath(dir, "missing.bin"), joinpath(dir, "garbage.bin"))
        rng_load!(rng)
        koila_error(() -> rng_load!(bad), KOILA_ERROR_IO; contains = "no generator is changed")
        @test draw() == after_save
    end
    close(opt)
    koila_error(() -> lr(opt), KOILA_ERROR_INVALID_ARGUMENT)
end

@testset "clip_grad_norm! against a hand-computed norm" begin
    # Gradients [3, 4] and [12]: joint norm 13.
    p = requires_grad!(Tensor(Float32[1, 1]))
    q = requires_grad!(Tensor(Float32[1]))
    nograd = requires_grad!(Tensor(Float32[5]))
    backward!(sum(p .* Tensor(Float32[3, 4])) + sum(q .* 12))
    @test clip_grad_norm!([p, q, nograd], 6.5) ≈ 13 rtol = 1e-6
    scale = 6.5 / (13 + 1e-6)
    @test Array(grad(p)) ≈ Float32[3, 4] .* scale rtol = 1e-5
    @test Array(grad(q)) ≈ Float32[12] .* scale rtol = 1e-5
    @test grad(nograd) === nothing
    # Under max_norm nothing changes; the norm is the clipped one.
    before = Array(grad(p))
    @test clip_grad_norm!([p, q], 100) ≈ 6.5 rtol = 1e-5
    @test Array(grad(p)) == before
    koila_error(() -> clip_grad_norm!([p], -1), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> clip_grad_norm!([p, p], 1), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> clip_grad_norm!([p, 1.0], 1), KOILA_ERROR_INVALID_ARGUMENT; contains = "not a Tensor")
    # A NaN in a gradient: refused, no gradient changed (skip the step).
    r = requires_grad!(Tensor(Float32[1, 2]))
    backward!(sum(r .* NaN32))
    koila_error(() -> clip_grad_norm!([p, r], 1), KOILA_ERROR_INVALID_ARGUMENT; contains = "norm")
    @test Array(grad(p)) == before
    # No gradient at all: the norm is 0, and no error.
    @test clip_grad_norm!([nograd], 1) == 0
end

@testset "DLPack: Julia arrays and koila tensors share memory" begin
    base = Koila._shared_count()
    A = Float32[1 2 3; 4 5 6]
    t = shared_tensor(A)
    @test Koila._shared_count() == base + 1
    @test size(t) == (2, 3) && eltype(t) == Float32 && !islazy(t)
    @test Array(t) == A && t[2, 1] == 4
    @test Array(sum(t; dims = 1)) == Float32[5 7 9][:]      # the ops see the logical index
    A[1, 2] = 20                                            # koila sees writes into A...
    @test t[1, 2] == 20
    requires_grad!(t)
    sgd = SGD([t]; lr = 0.25)
    tt = t .* t
    loss = sum(tt)
    backward!(loss)
    step!(sgd)                                              # ...and A sees koila's: p - 0.25 * 2p
    @test A == Float32[1 20 3; 4 5 6] ./ 2
    foreach(close, (loss, tt, sgd, t))
    @test Koila._shared_count() == base                     # the deleter ran, once

    # Element types; a tensor the GC frees releases its array too (the deleter in a finalizer).
    @test shared_round_trips((Int64[1, -2, 3], Bool[true, false], UInt8[200 7], reshape(Float64[1.5], 1, 1, 1),
                              fill(Int32(4)), Float16[0.5, 2], BFloat16.([1.5, -2]), Int8[-3]))
    GC.gc(); GC.gc()
    @test Koila._shared_count() == base
    koila_error(() -> shared_tensor(ComplexF32[1]), KOILA_ERROR_DTYPE)

    # shared_array: koila's memory as a Julia array with Array(t)'s index, written both ways.
    m = Tensor(Float32[1 2 3; 4 5 6])
    s = shared_array(m)
    @test s isa TensorArray{Float32,2} && size(s) == (2, 3) && s == Array(m)
    s[2, 3] = 60
    @test m[2, 3] == 60
    requires_grad!(m)
    msgd = SGD([m]; lr = 1)
    backward!(sum(m))
    step!(msgd)
    @test s == Float32[0 1 2; 3 4 59]
    close(m)
    @test s[1, 2] == 1                                      # the memory outlives the tensor
    @test Array(shared_array(lazy(Tensor(Float32[1, 2]), 1) .* 3)) == Float32[3, 6]
    @test size(shared_array(Koila.zeros(0, 3))) == (0, 3)
    @test shared_array(Tensor(Int64(7)))[] == 7
    # A round trip through both: the same memory, with the same index.
    C = Float64[1 2; 3 4; 5 6]
    c = shared_tensor(C)
    sc = shared_array(c)
    @test sc == C
    sc[3, 1] = 50
    @test C[3, 1] == 50
    # A transposed row-major tensor is column-major, and dense; a narrowed one is not.
    @test shared_array(transpose(Tensor(Float32[1 2 3; 4 5 6]), 1, 2)) == Float32[1 4; 2 5; 3 6]
    koila_error(() -> shared_array(narrow(Tensor(Float32[1 2 3; 4 5 6]), 2, 1, 2)), KOILA_ERROR_UNSUPPORTED;
                contains = "not dense")

    # The raw exchange: a struct built here, the deleter counted; a refused one is deleted too.
    D = Float32[1, 2, 3, 4]
    shape = Int64[4]
    deleter = @cfunction(count_deleter, Cvoid, (Ptr{Cvoid},))
    GC.@preserve D shape begin
        dl = Koila.DLTensor(pointer(D), Koila.DLDevice(1, 0), 1, Koila.DLDataType(2, 32, 1), pointer(shape),
                            C_NULL, 0)
        for (flags, code) in ((UInt64(0), nothing), (Koila.DLPACK_FLAG_BITMASK_READ_ONLY, KOILA_ERROR_UNSUPPORTED))
            deleted[] = 0
            managed = Ref(Koila.DLManagedTensorVersioned(Koila.DLPackVersion(1, 1), C_NULL, deleter, flags, dl))
            GC.@preserve managed begin
                ptr = Ptr{Cvoid}(Base.unsafe_convert(Ptr{Koila.DLManagedTensorVersioned}, managed))
                if code === nothing
                    u = unsafe_from_dlpack(ptr)
                    @test Array(u) == D
                    close(u)
                else
                    koila_error(() -> unsafe_from_dlpack(ptr), code; contains = "read-only")
                end
            end
            @test deleted[] == 1
        end
        deleted[] = 0
        plain = Ref(Koila.DLManagedTensor(dl, C_NULL, deleter))
        GC.@preserve plain begin
            ptr = Ptr{Cvoid}(Base.unsafe_convert(Ptr{Koila.DLManagedTensor}, plain))
            u = unsafe_from_dlpack(ptr; versioned = false)
            @test Array(u) == D
            close(u)
        end
        @test deleted[] == 1
    end
    koila_error(() -> unsafe_from_dlpack(Ptr{Cvoid}(C_NULL)), KOILA_ERROR_INVALID_ARGUMENT)
    # to_dlpack, then back: shared memory; the consumer (koila) calls the deleter.
    e = Tensor(Int32[1, 2, 3])
    ptr = to_dlpack(e; versioned = false)
    header = unsafe_load(Ptr{Koila.DLManagedTensor}(ptr)).dl_tensor
    @test header.ndim == 1 && header.dtype == Koila.DLDataType(0, 32, 1) && header.device == Koila.DLDevice(1, 0)
    f = unsafe_from_dlpack(ptr; versioned = false)
    unsafe_store!(Ptr{Int32}(header.data), Int32(10), 2)
    @test Array(f) == Int32[1, 10, 3] && Array(e) == Int32[1, 10, 3]
    dlpack_delete(to_dlpack(e))
end

# An MLP's mean cross-entropy over a lazy batch of n random samples; returns the loss and
# its parameters.
function lazy_mlp_loss(seed, n; din = 64, dh = 256, dout = 10)
    Koila.manual_seed!(seed)
    data = Koila.randn(n, din)
    labels = Tensor(Int64[k % dout for k in 0:n-1])
    W1 = requires_grad!(Koila.randn(dh, din) .* 0.1)
    b1 = requires_grad!(Koila.zeros(dh))
    W2 = requires_grad!(Koila.randn(dout, dh) .* 0.1)
    loss = cross_entropy(linear(relu(linear(lazy(data, 1), W1, b1)), W2), lazy(labels, 1))
    return loss, [W1, b1, W2]
end

@testset "chunked training: gradients equal the unsplit run's" begin
    n = 2048
    loss, params = lazy_mlp_loss(1, n)
    @test islazy(loss) && size(loss) == ()

    @test num_chunks(Plan(loss, :training)) == 1
    backward!(loss)
    unsplit = [Array(grad(p)) for p in params]
    foreach(zero_grad!, params)

    # A quarter of what the unsplit run needs beyond what is in use now.
    GC.gc()
    full = Plan(loss, :training)
    @test num_chunks(full) == 1
    current = memory_stats().current
    fullpeak = full_peak_bytes(full)
    @test fullpeak > current
    try
        set_memory_budget!(current + (fullpeak - current) ÷ 4)
        plan = Plan(loss, :training)
        @test num_chunks(plan) > 1
        @test chunk_size(plan) < n
        @test peak_bytes(plan) < fullpeak
        backward!(loss)
        for (p, g) in zip(params, unsplit)
            @test Array(grad(p)) ≈ g rtol = 1e-4 atol = 1e-6
        end
    finally
        set_memory_budget!(0)
    end
end

@testset "progress: each chunk of a chunked backward, in order" begin
    loss, _ = lazy_mlp_loss(2, 2048)
    seen = Tuple{String,Int64,Int64}[]
    try
        set_progress!((what, done, total) -> push!(seen, (what, done, total)))
        backward!(loss)
        @test seen == [("backward", 1, 1)]
        empty!(seen)
        GC.gc()
        current = memory_stats().current
        fullpeak = full_peak_bytes(Plan(loss, :training))
        set_memory_budget!(current + (fullpeak - current) ÷ 4)
        chunks = num_chunks(Plan(loss, :training))
        @test chunks > 1
        @test isempty(seen)  # planning reports nothing
        backward!(loss)
        @test seen == [("backward", k, chunks) for k in 1:chunks]
        set_progress!(nothing)
        empty!(seen)
        backward!(loss)
        @test isempty(seen)
    finally
        set_progress!(nothing)
        set_memory_budget!(0)
    end
end

# Linear(32, dh), BatchNorm1d(dh) in training (running statistics from zeros and ones),
# ReLU, Linear(dh, 10), mean cross-entropy, over a lazy batch of n random samples. Wide and
# thin, so that activations, not parameters, dominate even for 64 samples.
function lazy_batchnorm_loss(seed, n; dh = 1024)
    Koila.manual_seed!(seed)
    data = Koila.randn(n, 32)
    labels = Tensor(Int64[(3k) % 10 for k in 0:n-1])
    params = [requires_grad!(Koila.randn(shape...) .* 0.1) for shape in ((dh, 32), (dh,), (dh,), (dh,), (10, dh))]
    W1, b1, gamma, beta, W2 = params
    running_mean, running_var = Koila.zeros(dh), Koila.ones(dh)
    normed = batch_norm(linear(lazy(data, 1), W1, b1); weight = gamma, bias = beta,
                        running_mean = running_mean, running_var = running_var,
                        training = true, momentum = 0.1)
    loss = cross_entropy(linear(relu(normed), W2), lazy(labels, 1))
    return (loss = loss, data = data, params = params,
            running_mean = running_mean, running_var = running_var)
end

# Sets the largest CPU budget, in twentieths of what the unsplit backward from `loss` adds
# to what is in use, under which that backward runs in more than one chunk; false (and the
# automatic budget) when there is none.
function set_splitting_budget!(loss)
    set_memory_budget!(0)
    GC.gc()
    current = memory_stats().current
    fullpeak = full_peak_bytes(Plan(loss, :training))
    fullpeak > current || return false
    for twentieths in 19:-1:1
        set_memory_budget!(current + (fullpeak - current) * twentieths ÷ 20)
        chunks = try
            num_chunks(Plan(loss, :training))
        catch err
            err isa KoilaError || rethrow()
            0
        end
        chunks > 1 && return true
    end
    set_memory_budget!(0)
    return false
end

@testset "chunking options: the setters" begin
    try
        for policy in (:exact, :per_chunk, LibKoila.KOILA_BATCH_STATS_EXACT, LibKoila.KOILA_BATCH_STATS_PER_CHUNK)
            @test set_batch_stats!(policy) === nothing
        end
        for policy in (:largest, :fastest, LibKoila.KOILA_CHUNK_LARGEST, LibKoila.KOILA_CHUNK_FASTEST)
            @test set_chunking!(policy) === nothing
        end
        koila_error(() -> set_batch_stats!(:exactly), KOILA_ERROR_INVALID_ARGUMENT; contains = ":per_chunk")
        koila_error(() -> set_chunking!(:slowest), KOILA_ERROR_INVALID_ARGUMENT; contains = ":fastest")
        # The C functions refuse a value outside their enum.
        for (setter, T) in ((LibKoila.koila_set_batch_stats, LibKoila.koila_batch_stats),
                            (LibKoila.koila_set_chunking, LibKoila.koila_chunking))
            status = setter(reinterpret(T, Cint(7)))
            @test status != C_NULL
            @test LibKoila.koila_status_code(status) == KOILA_ERROR_INVALID_ARGUMENT
            LibKoila.koila_status_free(status)
        end
    finally
        set_batch_stats!(:exact)
        set_chunking!(:largest)
    end
end

@testset "recomputation: a sample that does not fit trains recomputing" begin
    # One long sequence [1, 512, 64] through 12 x (linear, gelu), then the mean of squares.
    function deep_mlp()
        manual_seed!(11)
        h = lazy(Koila.randn(1, 512, 64), 1)
        params = Tensor[]
        for _ in 1:12
            w = requires_grad!(Koila.randn(64, 64) * 0.125)
            b = requires_grad!(Koila.randn(64) * 0.1)
            push!(params, w, b)
            h = gelu(linear(h, w, b))
        end
        return Koila.mean(h .* h), params
    end
    try
        for policy in (:off, :as_needed, :preferred, LibKoila.KOILA_RECOMPUTE_OFF)
            @test set_recompute!(policy) === nothing
        end
        koila_error(() -> set_recompute!(:sometimes), KOILA_ERROR_INVALID_ARGUMENT; contains = ":as_needed")
        set_recompute!(:off)
        loss, params = deep_mlp()
        backward!(loss)
        plain = [Array(grad(p)) for p in params]
        loss, params = deep_mlp()
        current = memory_stats("cpu").current
        budget = current + (peak_bytes(Plan(loss, :training)) - current) ÷ 2
        set_memory_budget!("cpu", budget)
        koila_error(() -> Plan(loss, :training), KOILA_ERROR_OUT_OF_MEMORY; contains = "KOILA_RECOMPUTE_OFF")
        set_recompute!(:as_needed)
        @test recomputed_bytes(Plan(loss, :training)) > 0
        memory_reset_peak!("cpu")
        backward!(loss)
        @test memory_stats("cpu").peak <= budget
        @test [Array(grad(p)) for p in params] == plain
    finally
        set_recompute!(:as_needed)
        set_memory_budget!("cpu", 0)
    end
end

@testset "batch norm in training splits only with statistics per chunk" begin
    net = lazy_batchnorm_loss(11, 64)
    loss = net.loss
    try
        @test num_chunks(Plan(loss, :training)) == 1
        # A budget under which the batch splits (found with statistics per chunk).
        set_batch_stats!(:per_chunk)
        @test set_splitting_budget!(loss)

        # :exact: batch norm couples the batch; the error names the option.
        set_batch_stats!(:exact)
        koila_error(() -> Plan(loss, :training), KOILA_ERROR_NOT_SPLITTABLE;
                    contains = "koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK)")
        koila_error(() -> backward!(loss), KOILA_ERROR_NOT_SPLITTABLE)
        @test all(p -> grad(p) === nothing, net.params)
        @test all(iszero, Array(net.running_mean))

        # :per_chunk: the same graph plans split and says so; the backward runs.
        set_batch_stats!(:per_chunk)
        plan = Plan(loss, :training)
        @test num_chunks(plan) > 1
        @test occursin("Batch statistics: per chunk", describe(plan))
        backward!(loss)
        for p in net.params
            g = grad(p)
            @test g !== nothing
            g === nothing && continue
            @test all(isfinite, Array(g)) && any(!iszero, Array(g))
        end
        # One update of the running statistics with the whole batch's, as an unsplit run.
        h = Array(linear(net.data, net.params[1], net.params[2]))
        n = size(h, 1)
        m = vec(sum(h; dims = 1)) ./ n
        v = vec(sum((h .- m') .^ 2; dims = 1)) ./ (n - 1)
        @test Array(net.running_mean) ≈ 0.1f0 .* m rtol = 1e-4 atol = 1e-5
        @test Array(net.running_var) ≈ 0.9f0 .+ 0.1f0 .* v rtol = 1e-4 atol = 1e-5
    finally
        set_batch_stats!(:exact)
        set_memory_budget!(0)
    end
end

@testset "statistics per chunk leave an unsplit run unchanged" begin
    exact = lazy_batchnorm_loss(12, 64)
    exact_loss = item(exact.loss)
    backward!(exact.loss)
    try
        set_batch_stats!(:per_chunk)
        per_chunk = lazy_batchnorm_loss(12, 64)
        @test num_chunks(Plan(per_chunk.loss, :training)) == 1
        @test item(per_chunk.loss) == exact_loss
        backward!(per_chunk.loss)
        @test [Array(grad(p)) for p in per_chunk.params] == [Array(grad(p)) for p in exact.params]
        @test Array(per_chunk.running_mean) == Array(exact.running_mean)
        @test Array(per_chunk.running_var) == Array(exact.running_var)
    finally
        set_batch_stats!(:exact)
    end
end

@testset "fastest chunking gives the same results" begin
    loss, params = lazy_mlp_loss(13, 200)
    expected_loss = item(loss)
    backward!(loss)
    expected = [Array(grad(p)) for p in params]
    try
        set_chunking!(:fastest)
        # Unsplit and under a budget that splits; several runs, as the candidates are timed.
        for split in (false, true)
            split && @test set_splitting_budget!(loss)
            for _ in 1:3
                plan = Plan(loss, :training)
                @test peak_bytes(plan) <= budget_bytes(plan)
                foreach(zero_grad!, params)
                @test item(loss) ≈ expected_loss rtol = 1e-5
                backward!(loss)
                for (p, g) in zip(params, expected)
                    @test Array(grad(p)) ≈ g rtol = 1e-4 atol = 1e-6
                end
            end
        end
    finally
        set_chunking!(:largest)
        set_memory_budget!(0)
    end
end

models = get(ENV, "KOILA_TEST_MODELS", "")
if isempty(models) || !isfile(joinpath(models, "mlp.pt"))
    @warn "KOILA_TEST_MODELS is not set to a directory holding mlp.pt: module tests skipped"
else
@testset "process groups: a group of one is a plain backward; bad arguments" begin
    koila_error(() -> ProcessGroup("pigeon", "file:///tmp/x"; rank = 0, world_size = 1), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> ProcessGroup("gloo", "file:///tmp/x"; rank = 2, world_size = 2), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> ProcessGroup("gloo", "tcp://127.0.0.1"; rank = 0, world_size = 2), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> ProcessGroup("gloo", "file:///tmp/x"; rank = 0, world_size = 1, timeout = 0),
                KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> ProcessGroup("gloo", "tcp://127.0.0.1:9"; rank = 1, world_size = 2, timeout = 0.3),
                KOILA_ERROR_IO)
    dir = mktempdir()
    g = ProcessGroup("gloo", "file://" * joinpath(dir, "store"); rank = 0, world_size = 1, timeout = 10)
    @test group_rank(g) == 0 && group_size(g) == 1
    loss, params = lazy_mlp_loss(3, 64)
    group_broadcast!(g, params; root = 0)
    koila_error(() -> group_broadcast!(g, params; root = 1), KOILA_ERROR_INVALID_ARGUMENT)
    # params that miss a tensor the loss reaches: refused, nothing changed.
    koila_error(() -> group_backward!(g, loss, params[1:2]), KOILA_ERROR_INVALID_ARGUMENT; contains = "not in params")
    @test all(p -> grad(p) === nothing, params)
    group_backward!(g, loss, params)
    grouped = [Array(grad(p)) for p in params]
    foreach(zero_grad!, params)
    backward!(loss)
    for (p, gr) in zip(params, grouped)
        @test Array(grad(p)) ≈ gr rtol = 1e-6
    end
    close(g)
    @test !isopen(g)
    koila_error(() -> group_rank(g), KOILA_ERROR_INVALID_ARGUMENT)
end

@testset "TorchScript module (as the C test)" begin
    missingpath = joinpath(models, "no-such-model.pt")
    koila_error(() -> TorchModule(missingpath), KOILA_ERROR_IO; contains = missingpath)

    m = TorchModule(joinpath(models, "mlp.pt"))
    @test num_parameters(m) == 4
    @test parameter_name(m, 1) == "fc1.weight" && parameter_name(m, -1) == "fc2.bias"
    @test parameter_names(m) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    params = parameters(m)
    @test length(params) == 4
    @test size(params[1]) == (256, 784) && size(params[4]) == (10,)
    @test size(parameter(m, -1)) == (10,)
    koila_error(() -> parameter(m, 0), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> parameter(m, 5), KOILA_ERROR_INVALID_ARGUMENT)
    @test istraining(m)
    @test occursin("4 parameters", sprint(show, m))

    Koila.manual_seed!(0)
    data = Koila.randn(48, 784)
    labels = Tensor(Int64[k % 10 for k in 0:47])
    x, y = lazy(data, 1), lazy(labels, 1)
    logits = m(x)
    @test size(logits) == (48, 10)
    @test batchdim(logits) == 1 && islazy(logits)
    loss = cross_entropy(logits, y)
    opt = Adam(params; lr = 1e-3)
    values = Float64[]
    for step in 1:5
        zero_grad!(opt)
        push!(values, item(loss))
        backward!(loss)
        step!(opt)
    end
    @test values[end] < values[1]
    @test grad(params[1]) !== nothing
    koila_error(() -> forward(m, x, x), KOILA_ERROR_INVALID_ARGUMENT)
    koila_error(() -> m(lazy(Koila.randn(4, 3), 1)), KOILA_ERROR_SHAPE)

    # Saved with the trained parameters.
    saved = joinpath(mktempdir(), "julia-trained.pt")
    Koila.save(m, saved)
    again = Koila.load(saved)
    @test item(amax(abs.(again(x) .- logits))) == 0.0
    train!(m, false)
    @test !istraining(m)
    # An optimizer built from the module itself.
    sgd = SGD(m; lr = 0.01)
    zero_grad!(sgd)
    @test all(p -> grad(p) === nothing || all(iszero, Array(grad(p))), parameters(m))

    # Any order of closing.
    close(m); close(again); close(opt); close(sgd)
    @test size(logits) == (48, 10)
    @test isfinite(item(loss))
end

@testset "a run resumed from its checkpoint equals the uninterrupted run" begin
    # A fixed batch through mlp.pt, AdamW steps (the learning rate changed on the way).
    function run_steps!(m, opt, steps)
        Koila.manual_seed!(11)
        x = lazy(Koila.randn(16, 784), 1)
        y = lazy(Tensor(Int64[(3k) % 10 for k in 0:15]), 1)
        loss = cross_entropy(m(x), y)
        for _ in 1:steps
            zero_grad!(opt)
            backward!(loss)
            step!(opt)
        end
    end
    bits(m) = [reinterpret(UInt32, vec(Array(p))) for p in parameters(m)]
    dir = mktempdir()
    m = TorchModule(joinpath(models, "mlp.pt"))
    opt = AdamW(m; lr = 1e-3)
    run_steps!(m, opt, 2)
    set_lr!(opt, 5e-4)
    run_steps!(m, opt, 1)
    Koila.save(m, joinpath(dir, "model.pt"))
    Koila.save(opt, joinpath(dir, "adamw.state"))
    at_checkpoint = bits(m)
    run_steps!(m, opt, 3)
    uninterrupted = bits(m)
    @test uninterrupted != at_checkpoint
    # As a new process would: the module's file, a new optimizer over its parameters (other
    # hyperparameters: the file's replace them), the optimizer's file.
    resumed = TorchModule(joinpath(dir, "model.pt"))
    @test bits(resumed) == at_checkpoint
    opt2 = load!(AdamW(resumed; lr = 0.5), joinpath(dir, "adamw.state"))
    @test lr(opt2) == 5e-4
    run_steps!(resumed, opt2, 3)
    @test bits(resumed) == uninterrupted
    # With fresh moments instead, the run differs: the file carried them.
    fresh = TorchModule(joinpath(dir, "model.pt"))
    run_steps!(fresh, AdamW(fresh; lr = 5e-4), 3)
    @test bits(fresh) != uninterrupted
    @test clip_grad_norm!(fresh, 1e9) > 0                   # a module's parameters, as for optimizers
end

@testset "torch.export program (convbn_train.pt2: conv, batch norm in training, linear)" begin
    m = TorchModule(joinpath(models, "convbn_train.pt2"))
    @test module_kind(m) == :exported
    @test module_kind(TorchModule(joinpath(models, "mlp.pt"))) == :torchscript
    @test parameter_names(m) == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"]
    @test buffer_names(m) == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    @test num_buffers(m) == 3 && buffer_name(m, -1) == "bn.num_batches_tracked"
    koila_error(() -> buffer(m, 4), KOILA_ERROR_INVALID_ARGUMENT)
    @test istraining(m)
    koila_error(() -> train!(m, false), KOILA_ERROR_UNSUPPORTED; contains = "exported in training mode")
    tracked = buffer(m, 3)
    before = item(tracked)
    Koila.manual_seed!(2)
    x = lazy(Koila.randn(8, 3, 6, 6), 1)
    y = lazy(Tensor(Int64[k % 5 for k in 0:7]), 1)
    logits = m(x)
    @test size(logits) == (8, 5)
    backward!(cross_entropy(logits, y))
    @test item(tracked) == before + 1
    @test all(p -> grad(p) !== nothing, parameters(m))
    koila_error(() -> m(lazy(Koila.randn(8, 3, 7, 7), 1)), KOILA_ERROR_SHAPE)
end

@testset "several results (lstm_full.pt2: nn.LSTM's (output, (h, c)))" begin
    m = TorchModule(joinpath(models, "lstm_full.pt2"))
    Koila.manual_seed!(3)
    x = lazy(Koila.randn(8, 5, 4), 1)
    results = forward_all(m, x)
    @test length(results) == 3
    @test [size(r) for r in results] == [(8, 5, 6), (2, 8, 6), (2, 8, 6)]
    @test [batchdim(r) for r in results] == [1, 2, 2]
    loss = sum(results[1] .* results[1]) + sum(results[2] .* results[2]) + sum(results[3] .* results[3])
    backward!(loss)
    @test all(p -> grad(p) !== nothing, parameters(m))
    @test length(forward_all(TorchModule(joinpath(models, "mlp.pt")), Koila.randn(4, 784))) == 1
end
end

end # @testset "Koila"
