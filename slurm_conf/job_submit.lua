-- slurm-gavel job_submit.lua version 0.1.0
--[[
job_submit.lua for slurm-gavel: checks gavel jobs at submission and keeps their
placement in the scheduler's hands.

Install next to slurm.conf and set JobSubmitPlugins=lua. slurmctld runs this
file with the system liblua (5.1 on Debian 12's Slurm 22.05), so it sticks to
Lua 5.1. It does no I/O at all (no io.*, os.*, file reads): it runs inside
slurmctld, under its locks, for every submission.

A gavel job is one whose --comment starts with the word "gavel" (followed by the
end of the comment or whitespace). For such a job this plugin
  1. parses the flags with the grammar of slurm_gavel/flags.py, rule for rule and
     message for message (tests/test_flags.py runs both on one table of cases);
     a bad flag rejects the submission with a one-line message at sbatch;
  2. holds the job (priority 0): the gavel daemon decides where and when it runs;
  3. makes its GPU request untyped (gpu:v100:2 -> gpu:2): the daemon picks the
     GPU type through the partition, and Slurm refuses to change a pending job's
     typed GRES ("with and without type identification");
  3b. gives every distributed job a per-job GPU total, the invariant the daemon
     reshapes it around (docs/distributed.md): `-N k --gres=gpu:m` (k > 1) gets
     --gpus=k*m next to its per-node count; `--gpus=N -N 1` becomes the one-node
     request `--gres=gpu:N`; `--gpus=N` alone stays a job whose shape (nodes, GPUs
     per node) the daemon chooses. GPUs per task or per socket, and a fixed
     --ntasks-per-node (above 1) on such a job, are refused: they cannot follow
     the shape (ask --gpus=N --ntasks-per-gpu=1 instead);
  3c. with GAVEL_SHARDS_PER_GPU set (space sharing), asks a one-GPU job's GPU as
     that many shards, a whole GPU's (below);
  4. turns requeue on: preemption requeues the job;
  4b. refuses a component of a heterogeneous job (sbatch A : B): its components
     start together, so the daemon could not place, preempt or requeue one alone;
  5. stores the canonical flags in admin_comment ("gavel:v1 model=... weight=..."),
     which only administrators can change, so the daemon reads flags the user
     can no longer tamper with; with them the partition list given at submission
     (partitions=..., from job_desc.partition), since the daemon later moves the
     job between partitions and runs it only on those partitions' GPU types
     (types= restricts it the same way; GAVEL_GPU_TYPES below checks its names).
Any other job passes untouched.

On modification, a gavel job (admin_comment starting with "gavel:") can only be
changed by the uids in GAVEL_ADMIN_UIDS: the hold set above is a *user* hold,
so without this the owner could `scontrol release` the job (or move it to
another partition) and bypass the scheduler. scancel is not a modification and
keeps working for the owner.
]]

-- uids allowed to modify gavel jobs (release, change partition or nodes, ...).
-- Slurm 22.05 does not expose SlurmUser to Lua and this plugin reads no files,
-- so only root is allowed by default. If slurmctld's SlurmUser is not root, or
-- the gavel daemon runs as another (operator) user, add those uids here, e.g.
-- GAVEL_ADMIN_UIDS = { [0] = true, [64030] = true }
local GAVEL_ADMIN_UIDS = { [0] = true }

-- The cluster's GPU types (as in gres.conf and the daemon's partitions), to refuse an
-- unknown name in types= at sbatch, e.g. GAVEL_GPU_TYPES = { "v100", "p100", "k80" }.
-- nil: only the grammar is checked here, and the daemon holds a job naming an unknown
-- type back, saying why (gqueue).
local GAVEL_GPU_TYPES = nil

-- Space sharing (docs/space-sharing.md): the shards of each GPU in gres.conf
-- (Name=shard Count=S File=<that GPU>), or 0 (no space sharing, the default).
-- When set, a gavel job of one GPU on one node is submitted as --gres=shard:S,
-- a whole GPU's shards: alone it holds its GPU as before, and the daemon can
-- pair it with another by giving each S/2 shards of one GPU. Slurm 22.05
-- cannot switch a pending job from gpu to shard (it adds to the old GRES
-- list: "Invalid generic resource"), but it does change a shard count.
local GAVEL_SHARDS_PER_GPU = 0

-- The grammar; keep in step with slurm_gavel/flags.py.
local KEYS = { "model", "weight", "entity", "slo", "steps", "speeds", "types" }
local KNOWN = {
    model = true, weight = true, entity = true, slo = true, steps = true, speeds = true,
    types = true,
}
local EXAMPLES = {
    model = "model=resnet50", weight = "weight=2", entity = "entity=physics",
    slo = "slo=36h", steps = "steps=100000", speeds = "speeds=v100:4.2,p100:2.1",
    types = "types=v100,p100",
}
local UNIT_SECONDS = { s = 1, m = 60, h = 3600, d = 86400 }
local MAX_NAME_LEN = 64
local MAX_WEIGHT = 1000000
local MAX_DECIMALS = 6
local MAX_SLO_SECONDS = 365 * 86400
local MAX_STEPS = 1000000000000000      -- 10^15: exact in a Lua 5.1 number (double)
local MAX_SPEED = 1000000
local MAX_SPEEDS = 16                   -- entries in one speeds= list
local MAX_GPU_TYPE_LEN = 32
local MAX_TYPES = 16                    -- entries in one types= list
local MAX_PARTITIONS = 32               -- partitions in the list given at submission
local SHOW_LIMIT = 72                   -- items longer than this (bytes) are shortened
local SHOW_KEEP = 64
-- ASCII whitespace spelled out: %s depends on the C locale of slurmctld.
local WS_CHARS = " \t\n\v\f\r"

local function starts_gavel(text)
    if type(text) ~= "string" or string.sub(text, 1, 5) ~= "gavel" then
        return false
    end
    local next_char = string.sub(text, 6, 6)
    return next_char == "" or string.find(WS_CHARS, next_char, 1, true) ~= nil
end

-- The item as shown in a message: more than SHOW_LIMIT bytes keeps the first
-- SHOW_KEEP bytes, cut back so as not to split a UTF-8 sequence, then "...".
local function shown(item)
    if #item <= SHOW_LIMIT then
        return item
    end
    local cut = SHOW_KEEP
    while cut > 0 do
        local b = string.byte(item, cut + 1)
        if b < 128 or b >= 192 then break end   -- not a continuation byte
        cut = cut - 1
    end
    return string.sub(item, 1, cut) .. "..."
end

-- Each checker returns value, nil or nil, problem.
local function check_name(value, pattern, allowed)
    if not string.find(value, pattern) then
        return nil, "may use only letters, digits and " .. allowed
    end
    if #value > MAX_NAME_LEN then   -- after the pattern: ASCII, so bytes == characters
        return nil, "longer than " .. MAX_NAME_LEN .. " characters"
    end
    return value
end

local function check_model(value)
    return check_name(value, "^[A-Za-z0-9._+%-]+$", ". _ + -")
end

local function check_entity(value)
    return check_name(value, "^[A-Za-z0-9._%-]+$", ". _ -")
end

-- Plain decimal: integer digits, optional point, fraction digits (one digit at least).
local function decimal(text)
    local whole, frac = string.match(text, "^([0-9]*)%.?([0-9]*)$")
    if whole == nil or (whole == "" and frac == "") then
        return nil
    end
    return whole, frac
end

local function check_weight(value)
    local whole, frac = decimal(value)
    if whole == nil then
        return nil, "must be a number, e.g. weight=2 or weight=0.5"
    end
    if #frac > MAX_DECIMALS then
        return nil, "at most " .. MAX_DECIMALS .. " digits after the decimal point"
    end
    local w = tonumber(value)   -- strtod: the same double as Python's float()
    if w <= 0 then
        return nil, "must be greater than 0"
    end
    if w > MAX_WEIGHT then
        return nil, "must be at most " .. MAX_WEIGHT
    end
    return w
end

local function check_slo(value)
    local number, unit = string.match(value, "^([0-9.]*)(.*)$")
    local whole, frac = decimal(number)
    if whole == nil then
        return nil, "must be a number with a unit (s, m, h or d), e.g. slo=36h"
    end
    if unit == "" then
        return nil, "needs a unit (s, m, h or d), e.g. slo=36h"
    end
    local mult = UNIT_SECONDS[unit]
    if mult == nil then
        return nil, "unknown unit " .. unit .. " (use s, m, h or d), e.g. slo=36h"
    end
    if #frac > MAX_DECIMALS then
        return nil, "at most " .. MAX_DECIMALS .. " digits after the decimal point"
    end
    whole = string.gsub(whole, "^0+", "")
    if whole == "" and string.find(frac, "^0*$") then
        return nil, "must be greater than 0"
    end
    local too_long = "must be at most " .. string.format("%.0f", MAX_SLO_SECONDS / 86400) .. "d"
    if #whole > 9 then
        return nil, too_long
    end
    -- Exact arithmetic, every intermediate below 2^53: the whole part times the
    -- unit, plus the fraction's seconds rounded half up (as flags.py does it).
    local seconds = (tonumber(whole) or 0) * mult
    if seconds > MAX_SLO_SECONDS then
        return nil, too_long
    end
    local den = 10 ^ #frac
    seconds = seconds + math.floor((2 * (tonumber(frac) or 0) * mult + den) / (2 * den))
    if seconds > MAX_SLO_SECONDS then
        return nil, too_long
    end
    if seconds < 1 then
        return nil, "must be at least 1s"
    end
    return seconds
end

local function check_steps(value)
    if not string.find(value, "^[0-9]+$") then
        return nil, "must be a whole number, e.g. steps=100000"
    end
    local digits = string.gsub(value, "^0+", "")
    if digits == "" then
        return nil, "must be at least 1"
    end
    if #digits > 16 or tonumber(digits) > MAX_STEPS then
        return nil, "must be at most " .. string.format("%.0f", MAX_STEPS)
    end
    return tonumber(digits)
end

local function check_gpu_type(value)
    if not string.find(value, "^[A-Za-z0-9._%-]+$") then
        return nil, "GPU type " .. shown(value) .. " may use only letters, digits and . _ -"
    end
    if #value > MAX_GPU_TYPE_LEN then   -- after the pattern: ASCII
        return nil, "GPU type " .. shown(value) .. " is longer than " .. MAX_GPU_TYPE_LEN
                    .. " characters"
    end
    return value
end

-- Bytewise string order (Python's for ASCII). Lua's < on strings uses strcoll,
-- which depends on slurmctld's locale (en_US.UTF-8 ignores case and punctuation).
local function bytes_less(a, b)
    local n = math.min(#a, #b)
    for i = 1, n do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x < y end
    end
    return #a < #b
end

-- "TYPE:NUMBER,...": returns a list of { type, speed } sorted by type, or nil, problem.
local function check_speeds(value)
    local example = EXAMPLES.speeds
    local list, seen = {}, {}
    local start, index = 1, 0
    while true do
        -- Split on every comma, keeping empty entries (gmatch would drop them).
        local comma = string.find(value, ",", start, true)
        local entry
        if comma == nil then
            entry = string.sub(value, start)
        else
            entry = string.sub(value, start, comma - 1)
        end
        index = index + 1
        if entry == "" then
            return nil, "empty entry (a stray comma), e.g. " .. example
        end
        if index > MAX_SPEEDS then
            return nil, "at most " .. MAX_SPEEDS .. " GPU types"
        end
        local colon = string.find(entry, ":", 1, true)
        if colon == nil then
            return nil, "entry " .. shown(entry) .. " is not TYPE:NUMBER, e.g. " .. example
        end
        local gpu_type = string.sub(entry, 1, colon - 1)
        local number = string.sub(entry, colon + 1)
        if gpu_type == "" then
            return nil, "entry " .. shown(entry) .. " has no GPU type before ':', e.g. " .. example
        end
        local ok, problem = check_gpu_type(gpu_type)
        if ok == nil then
            return nil, problem
        end
        local whole, frac = decimal(number)
        if whole == nil then
            return nil, "speed of " .. gpu_type .. " must be a number, e.g. " .. example
        end
        if #frac > MAX_DECIMALS then
            return nil, "speed of " .. gpu_type .. ": at most " .. MAX_DECIMALS
                        .. " digits after the decimal point"
        end
        local speed = tonumber(number)   -- strtod: the same double as Python's float()
        if speed <= 0 then
            return nil, "speed of " .. gpu_type .. " must be greater than 0"
        end
        if speed > MAX_SPEED then
            return nil, "speed of " .. gpu_type .. " must be at most " .. MAX_SPEED
        end
        if seen[gpu_type] then
            return nil, "GPU type " .. gpu_type .. " is given twice"
        end
        seen[gpu_type] = true
        table.insert(list, { gpu_type, speed })
        if comma == nil then break end
        start = comma + 1
    end
    table.sort(list, function(a, b) return bytes_less(a[1], b[1]) end)
    return list
end

-- Split on every comma, keeping empty entries (gmatch would drop them).
local function split_commas(value)
    local out, start = {}, 1
    while true do
        local comma = string.find(value, ",", start, true)
        if comma == nil then
            table.insert(out, string.sub(value, start))
            return out
        end
        table.insert(out, string.sub(value, start, comma - 1))
        start = comma + 1
    end
end

local function sorted_keys(set)
    local list = {}
    for name in pairs(set) do table.insert(list, name) end
    table.sort(list, bytes_less)
    return list
end

-- "TYPE,...": returns the sorted list of types, or nil, problem.
local function check_types(value)
    local example = EXAMPLES.types
    local known
    if GAVEL_GPU_TYPES ~= nil then
        known = {}
        for _, name in ipairs(GAVEL_GPU_TYPES) do known[name] = true end
    end
    local seen = {}
    for index, entry in ipairs(split_commas(value)) do
        if entry == "" then
            return nil, "empty entry (a stray comma), e.g. " .. example
        end
        if index > MAX_TYPES then
            return nil, "at most " .. MAX_TYPES .. " GPU types"
        end
        local ok, problem = check_gpu_type(entry)
        if ok == nil then
            return nil, problem
        end
        if known ~= nil and not known[entry] then
            return nil, "unknown GPU type " .. entry .. " (this cluster has "
                        .. table.concat(sorted_keys(known), ", ") .. ")"
        end
        if seen[entry] then
            return nil, "GPU type " .. entry .. " is given twice"
        end
        seen[entry] = true
    end
    return sorted_keys(seen)
end

-- The partition list given at submission: sorted, duplicates and empty entries
-- dropped; nil (no list) or nil, problem.
local function check_partitions(value)
    local seen, count = {}, 0
    for _, name in ipairs(split_commas(value)) do
        if name ~= "" then
            count = count + 1
            seen[name] = true
        end
    end
    if count > MAX_PARTITIONS then
        return nil, "at most " .. MAX_PARTITIONS .. " partitions"
    end
    for _, name in ipairs(split_commas(value)) do
        if name ~= "" then
            if not string.find(name, "^[A-Za-z0-9._%-]+$") then
                return nil, "partition " .. shown(name) .. " may use only letters, digits and . _ -"
            end
            if #name > MAX_NAME_LEN then
                return nil, "partition " .. shown(name) .. " is longer than " .. MAX_NAME_LEN
                            .. " characters"
            end
        end
    end
    if count == 0 then
        return nil
    end
    return sorted_keys(seen)
end

local CHECKS = {
    model = check_model, weight = check_weight, entity = check_entity,
    slo = check_slo, steps = check_steps, speeds = check_speeds, types = check_types,
}

-- "%.6f" without trailing zeros (and point): the same text flags.py writes.
local function format_weight(w)
    local text = string.format("%.6f", w)
    text = string.gsub(text, "0+$", "")
    text = string.gsub(text, "%.$", "")
    return text
end

-- Canonical form, identical to flags.to_admin_comment.
local function admin_comment(values)
    local parts = { "gavel:v1" }
    if values.model then table.insert(parts, "model=" .. values.model) end
    table.insert(parts, "weight=" .. format_weight(values.weight or 1))
    if values.entity then table.insert(parts, "entity=" .. values.entity) end
    if values.slo then table.insert(parts, "slo=" .. string.format("%.0f", values.slo)) end
    if values.steps then table.insert(parts, "steps=" .. string.format("%.0f", values.steps)) end
    if values.speeds then
        local entries = {}
        for _, pair in ipairs(values.speeds) do
            table.insert(entries, pair[1] .. ":" .. format_weight(pair[2]))
        end
        table.insert(parts, "speeds=" .. table.concat(entries, ","))
    end
    if values.types then table.insert(parts, "types=" .. table.concat(values.types, ",")) end
    if values.partitions then
        table.insert(parts, "partitions=" .. table.concat(values.partitions, ","))
    end
    return table.concat(parts, " ")
end

-- Parse a gavel comment: returns the canonical admin comment, or nil and the
-- one-line message for the user (the first bad item, left to right).
local function parse_flags(comment, default_entity, partition)
    local values = {}
    local rest = string.sub(comment, 6)
    for item in string.gmatch(rest, "[^" .. WS_CHARS .. "]+") do
        local item_shown = shown(item)
        local function fail(problem)
            return nil, "gavel flags: " .. item_shown .. ": " .. problem
        end
        local eq = string.find(item, "=", 1, true)
        if eq == nil then
            return fail("expected key=value, e.g. model=resnet50")
        end
        local key = string.sub(item, 1, eq - 1)
        local value = string.sub(item, eq + 1)
        if key == "" then
            return fail("missing the key before '='")
        end
        if not KNOWN[key] then
            return fail("unknown key " .. shown(key) .. " (known keys: "
                        .. table.concat(KEYS, ", ") .. ")")
        end
        if values[key] ~= nil then
            return fail(key .. " is given twice")
        end
        if value == "" then
            return fail("empty value, e.g. " .. EXAMPLES[key])
        end
        local parsed, problem = CHECKS[key](value)
        if parsed == nil then
            return fail(problem)
        end
        values[key] = parsed
    end
    if type(partition) == "string" then
        local parsed, problem = check_partitions(partition)
        if parsed == nil and problem ~= nil then
            return nil, "gavel flags: " .. shown("--partition=" .. partition) .. ": " .. problem
        end
        values.partitions = parsed
    end
    if values.entity == nil and type(default_entity) == "string" then
        -- An account name the grammar cannot carry is left out, as in flags.py.
        values.entity = check_entity(default_entity)
    end
    return admin_comment(values)
end

-- GPU request rewriting. A GRES spec is a comma-separated list; in 22.05 the
-- items look like "gres:gpu:v100:2" (Slurm 23.02+ writes "gres/gpu:v100:2";
-- old-style "gpu:v100:2" also occurs). Every GPU item becomes untyped, and
-- several GPU items (gpu:v100:1,gpu:p100:1) merge into one with their total
-- count, in the place of the first. Returns the new spec and its GPU count.
local function untype_gpus(spec)
    if type(spec) ~= "string" or spec == "" then
        return spec, 0
    end
    local items, gpus, first_gpu = {}, 0, nil
    for item in string.gmatch(spec, "[^,]+") do
        local prefix, rest = string.match(item, "^(gres[:/])(.*)$")
        if prefix == nil then
            prefix, rest = "", item
        end
        -- 24.11 spells tres_per_task as TRES: "gres/gpu=1", "cpu=2,gres/gpu:v100=1"
        local sep = ":"
        local body, count = string.match(rest, "^(gpu[^=]*)=([0-9]+)$")
        if body ~= nil then
            rest, sep = body .. ":" .. count, "="
        end
        if rest == "gpu" or string.sub(rest, 1, 4) == "gpu:" then
            -- gpu | gpu:N | gpu:TYPE | gpu:TYPE:N  (no count means 1)
            local fields = {}
            for f in string.gmatch(string.sub(rest, 5), "[^:]+") do
                table.insert(fields, f)
            end
            local last = fields[#fields]
            if last ~= nil and string.find(last, "^[0-9]+$") then
                gpus = gpus + tonumber(last)
            else
                gpus = gpus + 1
            end
            if first_gpu == nil then
                table.insert(items, prefix .. "gpu" .. sep)   -- count filled in below
                first_gpu = #items
            end
        else
            table.insert(items, item)
        end
    end
    if first_gpu == nil then
        return spec, 0
    end
    items[first_gpu] = items[first_gpu] .. string.format("%.0f", gpus)
    return table.concat(items, ","), gpus
end

-- Every field a GPU request can arrive in (--gres / --gpus-per-node,
-- --gpus, --gpus-per-socket, --gpus-per-task).
local GPU_FIELDS = { "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }

-- Slurm's "not set" (NO_VAL) and "unlimited" (INFINITE) for a 32-bit count.
local NO_VAL = 4294967294

local function count_set(value)
    local n = tonumber(value)
    if n == nil or n <= 0 or n >= NO_VAL then
        return nil
    end
    return n
end

-- "gres:" (22.05) or "gres/" (23.02+): the spelling Slurm used in this field.
local function gres_prefix(spec)
    if type(spec) == "string" then
        local prefix = string.match(spec, "^(gres[:/])")
        if prefix ~= nil then return prefix end
    end
    return "gres:"
end

-- A 16-bit count such as ntasks_per_node: unset is NO_VAL16 (or INFINITE16).
local NO_VAL16 = 65534

local TASKS_REFUSED = "gavel flags: --ntasks-per-node cannot follow the shape the scheduler "
                      .. "chooses for a job on several nodes: ask --ntasks-per-gpu=1 (one task "
                      .. "per GPU wherever they are) or one task per node"

local SHAPE_REFUSED = "gavel flags: GPUs per task or per socket cannot be reshaped by the "
                      .. "scheduler: ask for the job's total, e.g. --gpus=4 (one task per GPU: "
                      .. "--gpus=4 --ntasks-per-gpu=1)"

-- The request as the daemon reshapes it (docs/distributed.md). `fields` holds the
-- untyped GPU fields, `counts` their GPU counts. Returns the fields to write, or nil
-- and the message for the user.
local function normalize_shape(job_desc, fields, counts)
    if counts.tres_per_task > 0 or counts.tres_per_socket > 0 then
        return nil, SHAPE_REFUSED
    end
    local per_job, per_node = counts.tres_per_job, counts.tres_per_node
    local min_nodes = count_set(job_desc.min_nodes)
    local max_nodes = count_set(job_desc.max_nodes)
    local out = {}
    if per_job == 0 and per_node > 0 and min_nodes ~= nil and min_nodes > 1 then
        -- -N k --gres=gpu:m: a distributed job of k*m GPUs
        out.tres_per_job = gres_prefix(fields.tres_per_node) .. "gpu:"
                           .. string.format("%.0f", min_nodes * per_node)
    elseif per_job > 0 and per_node == 0 and min_nodes == 1 and max_nodes == 1
            and string.find(fields.tres_per_job, ",", 1, true) == nil then
        -- --gpus=N -N 1: a one-node job of N GPUs, like --gres=gpu:N
        out.tres_per_node = fields.tres_per_job
        out.tres_per_job = ""
    end
    local reshapeable = (out.tres_per_job ~= nil and out.tres_per_job ~= "")
                        or (per_job > 0 and out.tres_per_job == nil)
    local tasks = tonumber(job_desc.ntasks_per_node)
    if reshapeable and tasks ~= nil and tasks > 1 and tasks < NO_VAL16 then
        return nil, TASKS_REFUSED
    end
    return out
end

-- Job script warnings. A gavel job is preempted by a signal to its batch shell
-- (scancel --batch): the training process must be what receives it. Two
-- mistakes cost a job all its work at the first preemption, so sbatch says so
-- (the job is still accepted):
--   * the training command started without `exec`: the shell gets the signal,
--     and a shell does not pass it on to the command it waits for;
--   * torchrun (or python -m torch.distributed.run/launch) started directly: it
--     exits on the signal without waiting for its ranks, which are orphaned and
--     keep training on GPUs already given to another job;
--   * accelerate launch started directly: it does not pass the signal on either
--     (its wrapper, python -m slurm_gavel.job.accelerate launch, does).
-- A script that sets its own `trap` is taken to pass the signal on itself.
-- Only line numbers are echoed, never the script's text.
local LAUNCHERS = {
    python = true, python3 = true, srun = true, torchrun = true, accelerate = true,
    deepspeed = true, mpirun = true, ["slurm-gavel"] = true,
}
local MAX_SCRIPT_LINES = 5000          -- scan no further (a real job script is short)

local function basename(word)
    return string.match(word, "([^/]*)$") or word
end

local function is_python(word)
    return word == "python" or string.match(word, "^python[0-9.]*$") ~= nil
end

-- The words of one command line, without leading VAR=value assignments and `env`.
local function command_words(line)
    local words = {}
    for word in string.gmatch(line, "[^" .. WS_CHARS .. "]+") do
        words[#words + 1] = word
        if #words >= 8 then break end
    end
    local i = 1
    while words[i] ~= nil and (words[i] == "env" or string.match(words[i], "^[%a_][%w_]*=") ~= nil) do
        i = i + 1
    end
    local out = {}
    for k = i, #words do out[#out + 1] = words[k] end
    return out
end

local function starts_torchrun(words, from)
    local first = basename(words[from] or "")
    if first == "torchrun" then
        return true
    end
    if is_python(first) and words[from + 1] == "-m" then
        local module = words[from + 2] or ""
        return module == "torch.distributed.run" or module == "torch.distributed.launch"
    end
    return false
end

local function starts_accelerate(words, from)
    return basename(words[from] or "") == "accelerate" and words[from + 1] == "launch"
end

local function script_warnings(script)
    local torchrun_line, accelerate_line, last, last_exec, last_word = nil, nil, nil, false, nil
    local has_trap, continued, n = false, false, 0
    for line in string.gmatch(script, "([^\n]*)\n?") do
        n = n + 1
        if n > MAX_SCRIPT_LINES then break end
        local text = string.match(line, "^[" .. WS_CHARS .. "]*(.-)[" .. WS_CHARS .. "]*$") or ""
        local was_continued = continued
        continued = string.sub(text, -1) == "\\"
        if not was_continued and text ~= "" and string.sub(text, 1, 1) ~= "#" then
            local words = command_words(text)
            local i, exec = 1, false
            if words[1] == "exec" then
                i, exec = 2, true
            end
            local word = basename(words[i] or "")
            if word == "trap" then
                has_trap = true
            end
            if torchrun_line == nil and starts_torchrun(words, i) then
                torchrun_line = n
            end
            if accelerate_line == nil and starts_accelerate(words, i) then
                accelerate_line = n
            end
            last, last_exec, last_word = n, exec, word
        end
    end
    local warnings = {}
    if torchrun_line ~= nil then
        warnings[#warnings + 1] = "gavel warning: line " .. torchrun_line .. " starts torchrun "
            .. "directly: on preemption torchrun exits without waiting for its ranks, which keep "
            .. "running; start it as `exec slurm-gavel run -- torchrun ...` (docs/torchrun.md)"
    end
    if accelerate_line ~= nil then
        warnings[#warnings + 1] = "gavel warning: line " .. accelerate_line .. " starts "
            .. "accelerate launch directly: it does not pass the preemption signal to its "
            .. "processes, which are killed or orphaned; start it as `exec python -m "
            .. "slurm_gavel.job.accelerate launch ...` (docs/accelerate.md)"
    end
    if last ~= nil and not last_exec and not has_trap
            and (LAUNCHERS[last_word] or is_python(last_word or "")) then
        warnings[#warnings + 1] = "gavel warning: line " .. last .. " starts the training "
            .. "without exec: the preemption signal reaches only the batch shell, which does not "
            .. "pass it on, so the job cannot save a checkpoint; write `exec` before the command "
            .. "(e.g. exec python train.py)"
    end
    return warnings
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local comment = job_desc.comment
    if not starts_gavel(comment) then
        return slurm.SUCCESS
    end
    -- A component of a heterogeneous job (sbatch A : B) is submitted with the others
    -- (this function runs once per component, only the first carries the script) and
    -- runs only with them: the daemon cannot place, preempt or requeue it alone.
    -- Slurm gives a job that is not heterogeneous NO_VAL as its offset.
    local het_offset = tonumber(job_desc.het_job_offset)
    if het_offset ~= nil and het_offset >= 0 and het_offset < NO_VAL then
        slurm.log_user("%s", "gavel flags: heterogeneous jobs (components joined with ':') "
                       .. "are not scheduled by gavel: submit the components as separate "
                       .. "jobs, or drop the gavel comment")
        return slurm.ERROR
    end
    -- srun and salloc jobs have no batch script: the daemon can neither signal
    -- them to checkpoint (scancel --batch) nor requeue them.
    if job_desc.script == nil or job_desc.script == "" then
        slurm.log_user("%s", "gavel flags: interactive jobs (srun, salloc) cannot be "
                       .. "preempted and resumed: submit a gavel job with sbatch")
        return slurm.ERROR
    end
    local account = job_desc.account
    if account == nil then
        account = job_desc.default_account
    end
    local canonical, message = parse_flags(comment, account, job_desc.partition)
    if canonical == nil then
        -- log_user formats its first argument: never pass user text as the format.
        slurm.log_user("%s", message)
        return slurm.ERROR
    end
    local gpus = 0
    local rewritten, fields, counts = {}, {}, {}
    for _, field in ipairs(GPU_FIELDS) do
        local old = job_desc[field]
        local new, n = untype_gpus(old)
        gpus = gpus + n
        fields[field], counts[field] = new, n
        if new ~= old then
            rewritten[field] = new
        end
    end
    if gpus == 0 then
        slurm.log_user("%s", "gavel flags: no GPU requested: a gavel job needs GPUs, "
                       .. "e.g. --gres=gpu:1 (the scheduler picks the GPU type)")
        return slurm.ERROR
    end
    local shape, refused = normalize_shape(job_desc, fields, counts)
    if shape == nil then
        slurm.log_user("%s", refused)
        return slurm.ERROR
    end
    for field, value in pairs(shape) do
        rewritten[field] = value
    end
    -- one GPU (--gres=gpu:1 on one node, or --gpus=1): a whole GPU's shards, to be paired
    local per_node = rewritten.tres_per_node or fields.tres_per_node or ""
    local per_job = rewritten.tres_per_job or fields.tres_per_job or ""
    local one_gpu = nil
    if per_job == "" then
        one_gpu = string.match(per_node, "^(gres[:/])gpu:1$")
    elseif per_node == "" then
        one_gpu = string.match(per_job, "^(gres[:/])gpu:1$")
    end
    if GAVEL_SHARDS_PER_GPU > 0 and one_gpu ~= nil and (count_set(job_desc.max_nodes) or 1) == 1 then
        rewritten.tres_per_node = one_gpu .. "shard:" .. string.format("%.0f", GAVEL_SHARDS_PER_GPU)
        if per_job ~= "" then
            rewritten.tres_per_job = ""
        end
    end
    for _, field in ipairs(GPU_FIELDS) do
        if rewritten[field] ~= nil then
            job_desc[field] = rewritten[field]
        end
    end
    for _, warning in ipairs(script_warnings(job_desc.script)) do
        slurm.log_user("%s", warning)
    end
    job_desc.priority = 0          -- held until the gavel daemon places it
    job_desc.requeue = 1           -- preemption requeues rather than kills
    job_desc.admin_comment = canonical
    slurm.log_info("%s", "gavel: held job of uid " .. tostring(submit_uid) .. ": " .. canonical)
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    local admin = job_rec and job_rec.admin_comment
    if type(admin) == "string" and string.sub(admin, 1, 6) == "gavel:"
            and not GAVEL_ADMIN_UIDS[modify_uid] then
        slurm.log_user("%s", "gavel jobs are placed by the gavel scheduler: only an "
                       .. "administrator can release or change them (scancel still works)")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

slurm.log_info("%s", "slurm-gavel job_submit.lua loaded")
return slurm.SUCCESS
