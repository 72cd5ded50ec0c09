--[[
Test driver for slurm_conf/job_submit.lua outside slurmctld (Lua 5.1).

    lua5.1 driver.lua PLUGIN ARG...

Loads PLUGIN in a sandbox holding only a fake `slurm` table and pure standard
functions (no io, os, require, load*: the plugin must do no I/O), then runs the
ARGs in order:

    set:FIELD=VALUE       job_desc FIELD is VALUE (a string) for later submits
    unset:FIELD           job_desc FIELD is nil for later submits
    submit:COMMENT        slurm_job_submit with job_desc.comment = COMMENT
    submit-nil            slurm_job_submit with no comment
    modify:UID:ADMIN      slurm_job_modify by UID of a job whose admin_comment is
                          ADMIN (empty: none)

Prints one JSON object per submit/modify, one per line:
    {"rc": "SUCCESS"|"ERROR"|"LUA_ERROR", "messages": [...], "writes": {...},
     "error": "..."}
`messages` are the slurm.log_user texts, `writes` every job_desc field the
plugin assigned (name -> value) and `error` the Lua error when rc is LUA_ERROR.
]]

local function json_string(s)
    s = string.gsub(s, '[%c"\\]', function(c)
        if c == '"' then return '\\"' end
        if c == "\\" then return "\\\\" end
        return string.format("\\u%04x", string.byte(c))
    end)
    return '"' .. s .. '"'
end

local function json(v)
    local t = type(v)
    if v == nil then return "null" end
    if t == "string" then return json_string(v) end
    if t == "number" then return string.format("%.17g", v) end
    if t == "boolean" then return tostring(v) end
    -- table: an array when v.__array, else an object with sorted keys
    local parts = {}
    if v.__array then
        for i = 1, v.n do parts[i] = json(v[i]) end
        return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do table.insert(keys, k) end
    table.sort(keys)
    for _, k in ipairs(keys) do
        table.insert(parts, json_string(k) .. ":" .. json(v[k]))
    end
    return "{" .. table.concat(parts, ",") .. "}"
end

local messages
local slurm = {
    SUCCESS = 0,
    ERROR = -1,
    -- Like slurmctld's: the first argument is a format.
    log_user = function(fmt, ...)
        messages.n = messages.n + 1
        messages[messages.n] = string.format(fmt, ...)
    end,
    log_info = function(fmt, ...) string.format(fmt, ...) end,
    log_debug = function(fmt, ...) string.format(fmt, ...) end,
    log_error = function(fmt, ...) string.format(fmt, ...) end,
}

local env = {
    slurm = slurm, string = string, table = table, math = math,
    pairs = pairs, ipairs = ipairs, next = next, select = select, type = type,
    tostring = tostring, tonumber = tonumber,
    error = error, pcall = pcall, assert = assert,
}

local plugin = assert(arg[1], "usage: driver.lua PLUGIN ARG...")
local chunk
if setfenv then                       -- Lua 5.1 (what Slurm embeds)
    chunk = assert(loadfile(plugin))
    setfenv(chunk, env)
else                                  -- Lua 5.2+
    chunk = assert(loadfile(plugin, "t", env))
end
local unpack = unpack or table.unpack
messages = { __array = true, n = 0 }
local ok, loaded = pcall(chunk)
if not ok then
    io.stderr:write("loading " .. plugin .. " failed: " .. tostring(loaded) .. "\n")
    os.exit(2)
end

-- a batch job unless a test says `unset:script` (srun/salloc jobs have none)
local fields = { script = "#!/bin/sh\ntrue\n" }

-- A job_desc that remembers what the plugin writes.
local function job_desc_for(comment)
    local data, writes = {}, {}
    for k, v in pairs(fields) do data[k] = v end
    data.comment = comment
    local proxy = setmetatable({}, {
        __index = data,
        __newindex = function(_, k, v) data[k] = v; writes[k] = v end,
    })
    return proxy, writes
end

local function run(fn, ...)
    messages = { __array = true, n = 0 }
    local args = { ... }
    local ok, rc = pcall(function() return fn(unpack(args)) end)
    local out = { messages = messages }
    if not ok then
        out.rc = "LUA_ERROR"
        out.error = tostring(rc)
    elseif rc == slurm.SUCCESS then
        out.rc = "SUCCESS"
    elseif rc == slurm.ERROR then
        out.rc = "ERROR"
    else
        out.rc = "OTHER:" .. tostring(rc)
    end
    return out
end

for i = 2, #arg do
    local a = arg[i]
    local out
    if string.sub(a, 1, 4) == "set:" then
        local k, v = string.match(a, "^set:([^=]+)=(.*)$")
        fields[k] = v
    elseif string.sub(a, 1, 6) == "unset:" then
        fields[string.sub(a, 7)] = nil
    elseif a == "submit-nil" or string.sub(a, 1, 7) == "submit:" then
        local comment = nil
        if a ~= "submit-nil" then comment = string.sub(a, 8) end
        local job_desc, writes = job_desc_for(comment)
        out = run(env.slurm_job_submit, job_desc, {}, 1000)
        out.writes = writes
    elseif string.sub(a, 1, 7) == "modify:" then
        local uid, admin = string.match(a, "^modify:([0-9]+):(.*)$")
        if admin == "" then admin = nil end
        local job_desc, writes = job_desc_for(nil)
        out = run(env.slurm_job_modify, job_desc, { admin_comment = admin }, {}, tonumber(uid))
        out.writes = writes
    else
        io.stderr:write("driver.lua: bad argument " .. a .. "\n")
        os.exit(2)
    end
    if out then
        io.write(json(out), "\n")
    end
end
