# SPDX-License-Identifier: MIT
"""Where each traced transfer's time went, from a PINSTAGE_TRACE file: per
size and direction the median, 90th percentile and slowest transfer; per
transfer its time, seats, the threads that copied and on how many CPUs, the
blocks the calling thread copied, the three largest gaps between the
caller's consecutive chunk events (O opened, C copied, E enqueued, L landed,
with the chunk), how many blocks ran inside the largest gap, and the longest
block (its time, thread t, CPU c and chunk).  python3 gaps.py TRACE"""
import sys, statistics as S
import tracefile
T,B,C=tracefile.read(sys.argv[1])
W='OCEL'
bysize={}
for i in sorted(T):
    d,by,ch,seats,b,e=T[i]
    bysize.setdefault((d,by),[]).append(i)
for (d,by),ids in sorted(bysize.items()):
    tot=[(T[i][5]-T[i][4])/1e3 for i in ids]
    print(f"== {d} {by}: {len(ids)} transfers, median {S.median(tot):.1f} us, p90 {sorted(tot)[int(len(tot)*0.9)]:.1f}, max {max(tot):.1f}")
    for i in ids:
        dd,by,ch,seats,b,e=T[i]; us=(e-b)/1e3
        ev=sorted([(b,-1,'start')]+[(a,c,W[w]) for c,w,a in C.get(i,[])]+[(e,-1,'end')])
        gaps=sorted(((ev[j+1][0]-ev[j][0])/1e3,j) for j in range(len(ev)-1))[::-1][:3]
        bl=B.get(i,[])
        lb=max(bl,key=lambda x:x[4]-x[3]) if bl else None
        g0=gaps[0][1] if gaps else 0
        inside=sum(1 for x in bl if x[3]>=ev[g0][0] and x[4]<=ev[g0+1][0]) if gaps else 0
        thr=len(set(x[1] for x in bl)); cpus=len(set(x[2] for x in bl))
        caller=sum(1 for x in bl if x[1]==0)
        gs=' '.join(f"{g:.0f}({ev[j][2]}{ev[j][1]}->{ev[j+1][2]}{ev[j+1][1]})" for g,j in gaps)
        lbs=f"{(lb[4]-lb[3])/1e3:.0f}us t{lb[1]} c{lb[2]} ch{lb[0]}" if lb else '-'
        print(f"T{i} {us:8.1f} seats {seats} thr {thr} cpus {cpus} callerblk {caller}/{len(bl)} gaps {gs} | inside {inside} | longest {lbs}")
