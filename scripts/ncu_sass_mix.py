import csv,sys,collections,re
f=sys.argv[1]
rows=[];k=None;hdr=None;out={}
for r in csv.reader(open(f)):
    if r and r[0]=="Kernel Name": k=r[1]; out[k]=[]; hdr=None; continue
    if r and r[0]=="Address": hdr=r; continue
    if hdr and r: out[k].append(dict(zip(hdr,r)))
for k,rs in out.items():
    tot=sum(int(x["Instructions Executed"] or 0) for x in rs)
    samp=sum(int(x["Warp Stall Sampling (All Samples)"] or 0) for x in rs)
    print("==",k,"instrs",tot,"samples",samp,"n",len(rs))
    op=collections.Counter(); st=collections.Counter()
    stallcols=[c for c in rs[0] if c.startswith("stall_") and "Not Issued" not in c]
    for x in rs:
        m=re.match(r"\s*(@!?U?P\w+\s+)?([A-Z0-9_]+)",x["Source"])
        o=m.group(2) if m else x["Source"][:10]
        op[o]+=int(x["Instructions Executed"] or 0)
        for c in stallcols: st[c]+=int(x[c] or 0)
    for o,c in op.most_common(25): print(f"  {o:10s} {c:9d} {100*c/tot:5.1f}%")
    print("  stalls:", ", ".join(f"{c[6:]} {100*v/max(1,sum(st.values())):.0f}%" for c,v in st.most_common(8)))
