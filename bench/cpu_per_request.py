#!/usr/bin/env python3
"""Server CPU and context switches per serial request: PORT PID N put|get.

Reads the server process utime+stime and its threads context switches
before and after N serial requests (one keep-alive http.client connection,
admin:admin). Bounded by N."""
import http.client, base64, json, os, sys, time
def cpu(pid):
    f=open(f"/proc/{pid}/stat").read().rsplit(")",1)[1].split()
    return (int(f[11])+int(f[12]))/os.sysconf("SC_CLK_TCK")
def ctxsw(pid):
    v=n=0
    for t in os.listdir(f"/proc/{pid}/task"):
        for l in open(f"/proc/{pid}/task/{t}/status"):
            if l.startswith("voluntary_ctxt_switches"): v+=int(l.split()[1])
            if l.startswith("nonvoluntary_ctxt_switches"): n+=int(l.split()[1])
    return v,n
port,pid,n,kind=int(sys.argv[1]),int(sys.argv[2]),int(sys.argv[3]),sys.argv[4]
h={"Authorization":"Basic "+base64.b64encode(b"admin:admin").decode(),"Content-Type":"application/json"}
c=http.client.HTTPConnection("127.0.0.1",port)
db=f"cpu{int(time.time())}"
c.request("PUT","/"+db,headers=h); c.getresponse().read()
for i in range(200):
    c.request("PUT",f"/{db}/w{i}",body='{"foo":"bar"}',headers=h); c.getresponse().read()
c0,s0,t0=cpu(pid),ctxsw(pid),time.time()
for i in range(n):
    if kind=="put":
        c.request("PUT",f"/{db}/d{i:08}",body='{"foo":"bar"}',headers=dict(h,**{"X-Couch-Full-Commit":"true"}))
    else:
        c.request("GET",f"/{db}/w{i%200}",headers=h)
    r=c.getresponse(); r.read(); assert r.status in (200,201), r.status
c1,s1,t1=cpu(pid),ctxsw(pid),time.time()
print(f"{kind} port {port}: {(c1-c0)/n*1e6:.0f} us CPU/req, ctx switches/req vol {(s1[0]-s0[0])/n:.2f} invol {(s1[1]-s0[1])/n:.2f}, wall {(t1-t0)/n*1e6:.0f} us/req")
c.request("DELETE","/"+db,headers=h); c.getresponse().read()
